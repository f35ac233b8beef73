"""CT-like phantoms for segmentation, at any resolution, with exact masks.

Each phantom is a list of ellipses in normalised coordinates [-1, 1]^2, drawn from a seed per
sample, so phantom ``i`` is the same object at 64 px and at 1024 px: only the sampling grid
changes. Like the Shepp-Logan phantom of CT, a large "body" ellipse holds "organs" of a
brighter tissue and small, brightest "lesions". The label of a pixel is the class of the last
ellipse drawn over its centre, so the masks are exact; the image is that class's intensity
(jittered per ellipse) plus Gaussian noise.

Classes: 0 air (background), 1 body, 2 organ, 3 lesion.

Memory: an image and its mask at R px take 4·R² + R² bytes (float32 image, uint8 labels):
5 MiB per sample at 1024 px, which is why the U-Net's activations, not the data, fill memory.
"""
import numpy as np

CLASSES = ("air", "body", "organ", "lesion")
_INTENSITY = (0.0, 0.3, 0.6, 0.95)


def _ellipses(rng):
    """(class, cx, cy, a, b, angle) tuples in drawing order."""
    body = (1, rng.uniform(-0.05, 0.05), rng.uniform(-0.05, 0.05),
            rng.uniform(0.7, 0.9), rng.uniform(0.55, 0.8), rng.uniform(-0.3, 0.3))
    shapes = [body]
    for cls, count, size in ((2, rng.integers(2, 4), (0.15, 0.3)), (3, rng.integers(1, 4), (0.06, 0.12))):
        for _ in range(count):
            r = rng.uniform(0, 0.5)
            t = rng.uniform(0, 2 * np.pi)
            shapes.append((cls, body[1] + r * body[3] * np.cos(t), body[2] + r * body[4] * np.sin(t),
                           rng.uniform(*size), rng.uniform(*size), rng.uniform(0, np.pi)))
    return shapes


def phantom(index, resolution=128, seed=0, noise=0.08):
    """Image (R, R) float32 and label mask (R, R) uint8 of phantom ``index``."""
    if not 8 <= resolution <= 4096:
        raise ValueError(f"resolution must be between 8 and 4096 pixels, got {resolution}")
    rng = np.random.default_rng([seed, index])
    centres = (np.arange(resolution) + 0.5) / resolution * 2 - 1
    y, x = np.meshgrid(centres, centres, indexing="ij")
    labels = np.zeros((resolution, resolution), np.uint8)
    image = np.zeros((resolution, resolution), np.float32)
    for cls, cx, cy, a, b, angle in _ellipses(rng):
        c, s = np.cos(angle), np.sin(angle)
        u, v = (x - cx) * c + (y - cy) * s, -(x - cx) * s + (y - cy) * c
        inside = (u / a) ** 2 + (v / b) ** 2 <= 1
        labels[inside] = cls
        image[inside] = _INTENSITY[cls] + rng.uniform(-0.04, 0.04)
    noise_rng = np.random.default_rng([seed, index, resolution])
    image += noise_rng.standard_normal(image.shape).astype(np.float32) * noise
    return image, labels


def make_phantoms(n, resolution=128, seed=0, noise=0.08):
    """``(images, labels)``: images (n, 1, R, R) float32, labels (n, R, R) int64."""
    pairs = [phantom(i, resolution, seed, noise) for i in range(n)]
    images = np.stack([p[0] for p in pairs])[:, None]
    labels = np.stack([p[1] for p in pairs]).astype(np.int64)
    return images, labels
