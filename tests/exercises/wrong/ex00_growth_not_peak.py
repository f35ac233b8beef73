"""00.3, the bytes live on entry left out: the peak growth, not the peak."""


def replay_peak(start, events):
    live = {b: 0 for b in start}
    peak, at_peak, phase, current = 0, dict(live), None, None
    for event in events:
        if event["kind"] == "mark":
            current = event["label"]
            continue
        live[event["bucket"]] += event["bytes"] if event["kind"] == "alloc" else -event["bytes"]
        if sum(live.values()) > peak:
            peak, at_peak, phase = sum(live.values()), dict(live), current
    return peak, at_peak, phase
