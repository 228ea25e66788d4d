"""The inputs of bench/compare, made deterministically (the same bytes on every run with the same
library versions), each written under a temporary name and renamed when complete, so that an
interrupted run leaves nothing that a later run would take for finished.

  fashion_mnist(dir, split)        Fashion-MNIST's IDX .gz files as numpy arrays
  png_folder_with_pil(...)         Fashion-MNIST as ROOT/<id>_<class>/<index>.png, the layout of
                                   samples/make_image_folder (used when it is not built)
  jpeg_folder(root, count, seed)   ImageNet-like 500 x 375 RGB JPEGs (quality 90) in 10 classes
  jpeg_folder_large(root, count)   the same images upscaled to 1224 x 918 (1.1 MP) with noise, q90
  csv_file(path, rows, seed)       rows x (32 float features, integer label 0..9)
"""

import gzip
import os
import shutil

import numpy as np

# Fashion-MNIST's classes by label id, as samples/make_image_folder names their folders.
CLASS_FOLDERS = ["0_T-shirt_top", "1_Trouser", "2_Pullover", "3_Dress", "4_Coat",
                 "5_Sandal", "6_Shirt", "7_Sneaker", "8_Bag", "9_Ankle_boot"]

FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}

CSV_FEATURES = 32


def _read_idx(path, magic):
    with gzip.open(path, "rb") as f:
        data = f.read()
    got = int.from_bytes(data[0:4], "big")
    if got != magic:
        raise ValueError(f"{path}: magic {got:#x}, expected {magic:#x}")
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def fashion_mnist(directory, split="train"):
    """images uint8 [N, 28, 28] and labels int64 [N] of a Fashion-MNIST split."""
    images, labels = FILES[split]
    x = _read_idx(os.path.join(directory, images), 0x803)
    y = _read_idx(os.path.join(directory, labels), 0x801).astype(np.int64)
    return x, y


def _fresh(path):
    """A temporary path next to `path`, emptied."""
    tmp = path + ".partial"
    if os.path.isdir(tmp):
        shutil.rmtree(tmp)
    elif os.path.exists(tmp):
        os.remove(tmp)
    return tmp


def png_folder_with_pil(root, fmnist_dir, split):
    """Fashion-MNIST split as root/<id>_<class>/<index>.png, 8-bit grayscale, indices zero-padded
    to the width of the last one (samples/make_image_folder's layout and pixels)."""
    from PIL import Image

    x, y = fashion_mnist(fmnist_dir, split)
    tmp = _fresh(root)
    for folder in CLASS_FOLDERS:
        os.makedirs(os.path.join(tmp, folder))
    digits = len(str(len(x) - 1))
    for i in range(len(x)):
        path = os.path.join(tmp, CLASS_FOLDERS[y[i]], f"{i:0{digits}d}.png")
        Image.fromarray(x[i], mode="L").save(path, optimize=False)
    os.rename(tmp, root)


def _jpeg_image(rng, cls, width=500, height=375):
    """One RGB image: a two-colour gradient whose hues depend on the class, 4-9 filled shapes
    (ellipses, rectangles, triangles), a faint texture and mild Gaussian noise."""
    from PIL import Image, ImageDraw

    base = np.array([(cls * 37) % 256, (cls * 91 + 60) % 256, (cls * 53 + 120) % 256], float)
    c0 = np.clip(base + rng.normal(0, 25, 3), 0, 255)
    c1 = np.clip(255 - base + rng.normal(0, 25, 3), 0, 255)
    angle = rng.uniform(0, np.pi)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    t = (xx * np.cos(angle) + yy * np.sin(angle))
    t = (t - t.min()) / (t.max() - t.min())
    img = c0[None, None, :] * (1 - t[..., None]) + c1[None, None, :] * t[..., None]
    pic = Image.fromarray(img.astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(pic)
    for _ in range(int(rng.integers(4, 10))):
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        x0, y0 = int(rng.integers(-50, width)), int(rng.integers(-50, height))
        w, h = int(rng.integers(20, 220)), int(rng.integers(20, 180))
        kind = (cls + int(rng.integers(0, 3))) % 3
        if kind == 0:
            draw.ellipse([x0, y0, x0 + w, y0 + h], fill=colour)
        elif kind == 1:
            draw.rectangle([x0, y0, x0 + w, y0 + h], fill=colour)
        else:
            draw.polygon([(x0, y0 + h), (x0 + w // 2, y0), (x0 + w, y0 + h)], fill=colour)
    # Texture (a plaid of random frequency) and sensor-like noise, for a photo's file size.
    fx, fy = rng.uniform(0.05, 0.6, 2)
    texture = 10 * np.sin(xx * fx)[..., None] * np.cos(yy * fy)[..., None]
    noisy = np.asarray(pic, dtype=np.float32) + texture + rng.normal(0, 8, (height, width, 3))
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8), "RGB")


def jpeg_folder(root, count, seed=2024):
    """`count` JPEGs of 500 x 375 in 10 class folders (class_0 ... class_9; image i in class
    i % 10), quality 90, 4:2:0 as PIL writes by default."""
    tmp = _fresh(root)
    for c in range(10):
        os.makedirs(os.path.join(tmp, f"class_{c}"))
    for i in range(count):
        cls = i % 10
        rng = np.random.default_rng([seed, i])
        _jpeg_image(rng, cls).save(os.path.join(tmp, f"class_{cls}", f"{i:05d}.jpg"), quality=90)
    os.rename(tmp, root)


def jpeg_folder_large(root, count, seed=2024, width=1224, height=918):
    """`count` JPEGs of about 1.1 MP (1224 x 918): jpeg_folder's 500 x 375 images, same classes
    and names, upscaled (bicubic) with fresh sensor-like noise (sigma 6) so that the detail is not
    only the upscale's, quality 90, 4:2:0."""
    from PIL import Image

    bicubic = getattr(Image, "Resampling", Image).BICUBIC
    tmp = _fresh(root)
    for c in range(10):
        os.makedirs(os.path.join(tmp, f"class_{c}"))
    for i in range(count):
        cls = i % 10
        rng = np.random.default_rng([seed, i])
        big = np.asarray(_jpeg_image(rng, cls).resize((width, height), bicubic), np.float32)
        noisy = big + rng.normal(0, 6, big.shape)
        Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8), "RGB").save(
            os.path.join(tmp, f"class_{cls}", f"{i:05d}.jpg"), quality=90)
    os.rename(tmp, root)


def csv_file(path, rows, seed=7):
    """A CSV with the header f0,...,f31,label and `rows` rows: per column a normal distribution
    with its own scale (0.1 .. 100) and offset, written with 5 decimals; the label an integer
    0..9. Made in blocks of 100,000 rows, each from its own seed."""
    tmp = _fresh(path)
    cols = np.random.default_rng([seed, 0xC5F]).uniform(-1, 2, CSV_FEATURES)
    scales, offsets = 10.0 ** cols, np.random.default_rng([seed, 1]).normal(0, 3, CSV_FEATURES)
    fmt = ["%.5f"] * CSV_FEATURES + ["%d"]
    block = 100_000
    with open(tmp, "w") as f:
        f.write(",".join([f"f{i}" for i in range(CSV_FEATURES)] + ["label"]) + "\n")
        for start in range(0, rows, block):
            n = min(block, rows - start)
            rng = np.random.default_rng([seed, 2, start // block])
            x = rng.standard_normal((n, CSV_FEATURES)) * scales + offsets
            y = rng.integers(0, 10, n)
            np.savetxt(f, np.column_stack([x, y]), fmt=fmt, delimiter=",")
    os.rename(tmp, path)
