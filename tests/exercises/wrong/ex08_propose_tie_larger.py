"""08.3, ties in time broken by the first row listed, not by the smaller one."""


def propose(rows, budget):
    fitting = [r for r in rows if r["bytes"] <= budget]
    return min(fitting, key=lambda r: r["seconds"]) if fitting else None
