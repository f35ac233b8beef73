"""Wrong answer to 07.3: no stage starts a backward until every stage's forwards are done, one full sweep later."""
TARGET = "gpipe_timeline"


def gpipe_timeline(stages, micro_batches):
    start = 2 * (micro_batches + stages - 1)
    slots = start + micro_batches + stages - 1
    timeline = [[None] * slots for _ in range(stages)]
    for s in range(stages):
        for m in range(micro_batches):
            timeline[s][s + m] = ("F", m)
            timeline[s][start - micro_batches + (stages - 1 - s) + m + stages] = ("B", m)
    return timeline
