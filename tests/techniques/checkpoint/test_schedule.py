"""The byte-budget chooser: predictions bound the ledger's peak, and the choice fits and is cheapest."""
import numpy as np
import pytest
from _ckpt_models import RunningMean

import tinymem as tm
from tinymem.techniques.checkpoint.schedule import (candidate_plans, choose_schedule, predict_revolve,
                                       predict_segments, profile_layers)
from tinymem.techniques.checkpoint import checkpoint_sequential
from tinymem.techniques.checkpoint.revolve import checkpoint_revolve


def network(depth=12, width=32):
    tm.manual_seed(0)
    return tm.models.MLP([width] * (depth + 1), dropout=0.2, layernorm=True)


def activation_peak(run, model, x):
    """The ledger's highest activation bytes over forward + backward (no loss: its saved arrays
    are not the network's)."""
    g = np.ones((x.shape[0], model.sizes[-1]), np.float32)
    with tm.memory.track(measure=False) as t:
        out = run(model, x)
        out.backward(g)
        del out
    return t.max_by_bucket()["activation"], t


@pytest.mark.parametrize("kind,count", [("segments", 1), ("segments", 3), ("segments", "sqrt"),
                                        ("segments", 35), ("revolve", 1), ("revolve", 3), ("revolve", 8)])
def test_ledger_peak_within_predicted_bound(kind, count):
    model = network()
    x = tm.randn(16, 32, requires_grad=True)
    profile = profile_layers(model, x)
    if kind == "segments":
        bound = predict_segments(profile, x.nbytes, count)
        peak, t = activation_peak(lambda m, h: checkpoint_sequential(m, count, h), model, x)
    else:
        bound = predict_revolve(profile, x.nbytes, count)
        peak, t = activation_peak(lambda m, h: checkpoint_revolve(m, count, h), model, x)
    table = tm.memory.format_table(t.max_by_bucket(), "highest bytes per bucket")
    assert peak <= bound, f"{kind}={count}: peak {peak} above the predicted bound {bound}\n{table}"
    # The prediction counts shared buffers once, as the ledger does: it should be exact here.
    assert peak >= 0.97 * bound, f"{kind}={count}: peak {peak} far below the bound {bound}\n{table}"


def test_sqrt_segments_shrink_the_peak_as_predicted():
    model = network(depth=16)
    x = tm.randn(16, 32, requires_grad=True)
    plain, _ = activation_peak(lambda m, h: m(h), model, x)
    ckpt, _ = activation_peak(lambda m, h: checkpoint_sequential(m, "sqrt", h), model, x)
    assert ckpt < 0.5 * plain


def test_profile_changes_neither_rng_nor_running_statistics():
    stat = RunningMean()
    layers = [tm.nn.Linear(4, 4), tm.nn.Dropout(0.5), stat]
    x = tm.randn(2, 4)
    state = tm.get_rng_state()
    profile = profile_layers(layers, x)
    assert np.array_equal(state, tm.get_rng_state()) and stat.updates == 0
    assert [p.output_bytes for p in profile] == [32, 32, 32]
    assert [(p.saves_input, p.saves_output) for p in profile] == [(True, False), (False, False), (False, False)]
    assert profile[0].saved_bytes == 32 and profile[1].saved_bytes == 8  # the input; a 1-byte mask


def test_choice_fits_the_budget_and_recomputes_least():
    model = network()
    x = tm.randn(16, 32, requires_grad=True)
    profile = profile_layers(model, x)
    plans = candidate_plans(profile, x.nbytes)
    full = max(p.predicted_peak for p in plans)
    for fraction in (1.0, 0.5, 0.3, 0.15):
        budget = int(full * fraction)
        plan = choose_schedule(model, x, budget)
        cheapest = min(p.recomputed for p in plans if p.predicted_peak <= budget)
        assert plan.recomputed == cheapest and plan.predicted_peak <= budget
        peak, t = activation_peak(lambda m, h: plan(m, h), model, x)
        assert peak <= budget, tm.memory.format_table(t.max_by_bucket())
    assert choose_schedule(model, x, full).recomputed == 0


def test_budget_too_small_is_a_clear_error():
    model = network()
    with pytest.raises(tm.OutOfMemoryError, match="no checkpointing schedule fits"):
        choose_schedule(model, tm.randn(16, 32, requires_grad=True), 100)
