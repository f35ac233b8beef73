"""06.4, the accumulator grows by the row's sum of g² instead of its mean."""
import numpy as np


def rowwise_adagrad_rows(weight, accumulator, indices, grad_rows, lr, eps=1e-10):
    accumulator[indices] += (grad_rows * grad_rows).sum(axis=1)
    weight[indices] -= lr * grad_rows / (np.sqrt(accumulator[indices]) + eps)[:, None]
