"""06.2, the kernel flipped (a true convolution), where PyTorch and tinymem cross-correlate."""


def conv2d_im2col(x, weight, stride=1, padding=0):
    return solution.conv2d_im2col(x, weight[:, :, ::-1, ::-1], stride, padding)  # noqa: F821
