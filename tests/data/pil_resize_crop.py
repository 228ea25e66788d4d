#!/usr/bin/python3
"""torchvision's Resize(256) + CenterCrop(224) on PIL, for image_resize_test: for each JPEG
named, writes <file>.pil, the 224 x 224 RGB bytes PIL makes of it (bilinear, antialiased).

  tests/data/pil_resize_crop.py FILE...
"""

import sys

from PIL import Image

BILINEAR = getattr(Image, "Resampling", Image).BILINEAR


def resize_center_crop(img, size=256, crop=224):
    # torchvision.transforms.functional.resize with an int: the shorter side to `size`, the
    # longer int(size * long / short); then center_crop's int(round((side - crop) / 2.0)).
    w, h = img.size
    if w <= h:
        nw, nh = size, int(size * h / w)
    else:
        nw, nh = int(size * w / h), size
    img = img.resize((nw, nh), BILINEAR)
    left = int(round((nw - crop) / 2.0))
    top = int(round((nh - crop) / 2.0))
    return img.crop((left, top, left + crop, top + crop))


for path in sys.argv[1:]:
    with Image.open(path) as img:
        out = resize_center_crop(img.convert("RGB"))
    with open(path + ".pil", "wb") as f:
        f.write(out.tobytes())
