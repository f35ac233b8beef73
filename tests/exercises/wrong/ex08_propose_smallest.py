"""08.3, the smallest row that fits proposed instead of the fastest."""


def propose(rows, budget):
    fitting = [r for r in rows if r["bytes"] <= budget]
    return min(fitting, key=lambda r: r["bytes"]) if fitting else None
