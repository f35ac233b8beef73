"""06.4, the step taken with the accumulator as it was before this gradient was added."""
import numpy as np


def rowwise_adagrad_rows(weight, accumulator, indices, grad_rows, lr, eps=1e-10):
    weight[indices] -= lr * grad_rows / (np.sqrt(accumulator[indices]) + eps)[:, None]
    accumulator[indices] += (grad_rows * grad_rows).mean(axis=1)
