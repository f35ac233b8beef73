"""00.3, the phase read at the end of the window instead of at the peak."""


def replay_peak(start, events):
    live = dict(start)
    peak, at_peak, phase = sum(live.values()), dict(live), None
    for event in events:
        if event["kind"] == "mark":
            phase = event["label"]
            continue
        live[event["bucket"]] += event["bytes"] if event["kind"] == "alloc" else -event["bytes"]
        if sum(live.values()) > peak:
            peak, at_peak = sum(live.values()), dict(live)
    return peak, at_peak, phase
