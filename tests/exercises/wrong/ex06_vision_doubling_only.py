"""06.4, doubling only: the last power of two that fits, without bisecting what lies between."""


def largest_fitting(fits, good, bad):
    n = good
    while n * 2 < bad and fits(n * 2):
        n *= 2
    return n
