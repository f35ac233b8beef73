"""06.4, a linear search upward from good: right, but hundreds of trial steps."""


def largest_fitting(fits, good, bad):
    n = good
    while n + 1 < bad and fits(n + 1):
        n += 1
    return n
