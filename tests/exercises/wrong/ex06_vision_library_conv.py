"""06.2, tinymem's conv2d called on the arrays."""
import tinymem as tm
import tinymem.functional as F


def conv2d_im2col(x, weight, stride=1, padding=0):
    return F.conv2d(tm.tensor(x), tm.tensor(weight), stride=stride, padding=padding).numpy()
