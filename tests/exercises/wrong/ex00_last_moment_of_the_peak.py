"""00.3, ">=" instead of ">": the last moment the peak is reached, not the first."""


def replay_peak(start, events):
    live = dict(start)
    peak, at_peak, phase, current = sum(live.values()), dict(live), None, None
    for event in events:
        if event["kind"] == "mark":
            current = event["label"]
            continue
        live[event["bucket"]] += event["bytes"] if event["kind"] == "alloc" else -event["bytes"]
        if sum(live.values()) >= peak:
            peak, at_peak, phase = sum(live.values()), dict(live), current
    return peak, at_peak, phase
