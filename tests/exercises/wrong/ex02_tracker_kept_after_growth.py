"""02.4, after a growth the tracker is not restarted, so the scale grows only once."""


def update_scale(scale, growth_tracker, found_inf, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000):
    new_scale, tracker = solution.update_scale(scale, growth_tracker, found_inf, growth_factor,  # noqa: F821
                                               backoff_factor, growth_interval)
    return (new_scale, growth_tracker + 1) if new_scale > scale else (new_scale, tracker)
