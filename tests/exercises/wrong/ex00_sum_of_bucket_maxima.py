"""00.3, the peak taken as the sum of each bucket's own maximum."""


def replay_peak(start, events):
    live, highest, phase = dict(start), dict(start), None
    for event in events:
        if event["kind"] == "mark":
            phase = event["label"]
            continue
        live[event["bucket"]] += event["bytes"] if event["kind"] == "alloc" else -event["bytes"]
        highest[event["bucket"]] = max(highest[event["bucket"]], live[event["bucket"]])
    return sum(highest.values()), highest, phase
