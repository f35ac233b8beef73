"""01.1, the formula on paper: k kept inputs plus ceil(n / k) states of one segment."""
import math


def segment_peak_states(n, k):
    return k + math.ceil(n / k)
