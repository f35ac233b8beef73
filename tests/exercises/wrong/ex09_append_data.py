"""Lesson 9, one plausible wrong answer: the log keeps the loss's 0-d array: no graph, but 4 bytes
a step. Only the mistaken function is here; the test puts it in place of the reference answer's."""
import tinymem.functional as F


def logged_step(model, opt, x, y, log):
    model.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    log.append(loss.data)
