#!/usr/bin/python3
"""torchvision's Resize(256) + CenterCrop(224) on PIL, for image_resize_test: for each JPEG
named, writes <file>.pil, the 224 x 224 RGB bytes PIL makes of it (bilinear, antialiased).
With --crops LIST, torchvision's RandomResizedCrop(224) + flip of given boxes instead: each line
of LIST is "JPEG LEFT TOP RIGHT BOTTOM FLIP OUT", and OUT gets the 224 x 224 RGB bytes of
F.resized_crop (the box cropped, then resized bilinear, antialiased), mirrored where FLIP is 1.

  tests/data/pil_resize_crop.py FILE...
  tests/data/pil_resize_crop.py --crops LIST
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


def resized_crops(listing, size=224):
    with open(listing) as f:
        for line in f:
            path, left, top, right, bottom, flip, out_path = line.split()
            with Image.open(path) as img:
                box = (int(left), int(top), int(right), int(bottom))
                out = img.convert("RGB").crop(box).resize((size, size), BILINEAR)
            if flip == "1":
                out = out.transpose(FLIP)
            with open(out_path, "wb") as o:
                o.write(out.tobytes())


FLIP = getattr(Image, "Transpose", Image).FLIP_LEFT_RIGHT

if sys.argv[1:2] == ["--crops"]:
    resized_crops(sys.argv[2])
    sys.exit(0)

for path in sys.argv[1:]:
    with Image.open(path) as img:
        out = resize_center_crop(img.convert("RGB"))
    with open(path + ".pil", "wb") as f:
        f.write(out.tobytes())
