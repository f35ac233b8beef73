"""What one precision costs, term by term: the single value the closed form passes down.

A training precision decides five widths, in bytes per parameter (or per saved value):

    precision   weight  gradient  master  master gradient  state  compute  saved tensors
    fp32          4        4        0          0             4       4        fp32
    fp16/mixed    2        2        4          4             4       2        fp16
    bf16          2        2        4          4             4       2        bf16
    bf16-pure     2        2        0          0             2       2        bf16

``master``: the fp32 copy of each weight the update runs on (``precision.MasterOptimizer``);
``master gradient``: the fp32 gradients that update reads, alive during the step; ``state``: the
bytes per value of the optimizer's own buffers (``optim.table`` counts them at this itemsize:
Adam's m and v are 8 bytes per parameter in fp32, 4 in pure bf16, as ``torch.optim.Adam`` keeps
them in the parameter's dtype); ``compute``: the dtype an op computes in on a GPU. "bf16-pure"
trains the bf16 weights themselves, with no fp32 copy: 2 + 2 + 4 = 8 bytes per parameter with
Adam instead of 16 (its risk: updates smaller than bf16's 8-bit mantissa resolves are lost).
"""
from collections import namedtuple

Width = namedtuple("Width", "name weight gradient master master_gradient state compute storage")
Width.__doc__ = "Bytes per parameter (per saved value for ``compute``) of one precision; see the module."
# A name becomes its Width at the closed form's door, once: tinymem.planner.inputs.width.

WIDTHS = {
    "fp32": Width("fp32", 4, 4, 0, 0, 4, 4, "fp32"),
    "fp16": Width("fp16", 2, 2, 4, 4, 4, 2, "fp16"),
    "mixed": Width("mixed", 2, 2, 4, 4, 4, 2, "fp16"),
    "bf16": Width("bf16", 2, 2, 4, 4, 4, 2, "bf16"),
    "bf16-pure": Width("bf16-pure", 2, 2, 0, 0, 2, 2, "bf16"),
}
PRECISIONS = tuple(WIDTHS)
