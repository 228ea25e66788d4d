"""Errors that name the mistake, for the constructors of ferry's classes.

pybind11 answers a call it cannot match (an option of the wrong type, a keyword that does not
exist, an option given by position) with a TypeError listing the whole signature. When that
happens, explain() works out which argument is at fault, from the signature pybind11 itself
wrote into the constructor's docstring, and raises a TypeError (a wrong type, an unknown keyword,
a keyword given by position) or a ValueError (a number out of range) that names it and says what
it takes. A call pybind11 accepts never comes here: the check costs nothing then.
"""

import difflib
import numbers
import re

# Keywords of other libraries (torch's DataLoader, torchvision's transforms) and what ferry
# takes instead, by the class they are given to ("*": any).
_INSTEAD = {
    "Loader": {
        "num_workers": "workers= (threads reading ferry's datasets) or processes= (worker "
                       "processes for a dataset written in Python); ferry.torch.DataLoader "
                       "takes num_workers=",
        "prefetch_factor": "prefetch= (staging slots: batches being read or waiting, in all)",
        "collate_fn": "ferry stacks each field itself (ragged first dimensions: ragged='pad' or "
                      "'pack'); return arrays from __getitem__",
        "sampler": "shuffle= and seed= (rank= and world_size= for several processes)",
        "batch_sampler": "batch_size= (max_tokens= for batches by a token budget)",
        "generator": "seed= (an int)",
        "persistent_workers": "nothing: ferry's workers persist across epochs",
        "pin_memory_device": "device=",
        "multiprocessing_context": "start_method= ('forkserver' or 'spawn')",
    },
    "*": {
        "size": "height= and width= (the output's size; resize= is the shorter side before "
                "the center crop)",
        "image_size": "height= and width=",
        "crop_size": "height= and width=",
        "transform": "the image keywords: height=, width=, geometry= "
                     "('random_resized_crop' is torchvision's RandomResizedCrop), "
                     "random_flip=, normalize=ferry.Normalize(mean=..., std=...) "
                     "(docs/DATASETS.md)",
        "mean": "normalize=ferry.Normalize(mean=..., std=...)",
        "std": "normalize=ferry.Normalize(mean=..., std=...)",
    },
}

# The least value of options whose C++ type is unsigned, where it is more than 0.
_MINIMUM = {"batch_size": 1}
# Options whose C++ type is signed: pybind11 takes a negative value there (ferry's own check then
# refuses it, naming the option), so that it is not what made a call fail.
_SIGNED = {"workers", "prefetch", "device_buffers", "pad_multiple", "height", "width",
           "channels", "resize", "max_pixels", "max_jpeg_scans", "seq_len", "stride",
           "connections", "retries"}


# Counts whose C++ type is signed and which ferry's own checks refuse below 0 as a ConfigError: a
# negative one is a ValueError, as for the unsigned ones (docs/PYTHON.md), with its least value.
_COUNTS = {"channels": 0, "sample_rate": 0, "height": 1, "width": 1, "frames": 1, "stride": 1,
           "clips_per_video": 1, "decode_threads": 0}


def negative_count(name, params, kwargs):
    """The ValueError for a count below 0 among `kwargs`, or None."""
    known = {p.name for p in params or ()}
    for key, least in _COUNTS.items():
        value = kwargs.get(key)
        if key in known and isinstance(value, int) and not isinstance(value, bool) and value < 0:
            return ValueError("%s: %s is an int >= %d, not %r" % (name, key, least, value))
    return None


class _Param:
    def __init__(self, name, kind, default, keyword_only):
        self.name = name
        self.kind = kind
        self.default = default
        self.keyword_only = keyword_only


def _outside_quotes(text, start=0, depth=0):
    """Yields (index, character, bracket depth after it) for each character of `text` from
    `start` that is outside quotes."""
    quote = None
    for i in range(start, len(text)):
        c = text[i]
        if quote:
            if c == quote:
                quote = None
            continue
        if c in "'\"":
            quote = c
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        yield i, c, depth


def _split(text):
    """Splits at the commas outside brackets and quotes."""
    parts, start = [], 0
    for i, c, depth in _outside_quotes(text):
        if c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if text[start:].strip():
        parts.append(text[start:].strip())
    return parts


def signature(doc):
    """The parameters of the first signature in a pybind11 docstring (without self), or None
    where the docstring holds none."""
    match = re.match(r"\s*__init__\(", doc or "")
    if not match:
        return None
    end = None
    for i, c, depth in _outside_quotes(doc, match.end(), 1):
        if c in ")]}" and depth == 0:
            end = i
            break
    if end is None:
        return None
    params, keyword_only = [], False
    for part in _split(doc[match.end():end]):
        if part == "*":
            keyword_only = True
            continue
        if part.startswith("*"):
            return None  # *args / **kwargs: nothing to check against
        head, _, default = part.partition(" = ")
        name, _, kind = head.partition(": ")
        if name == "self":
            continue
        params.append(_Param(name.strip(), kind.strip(), default.strip() if default else None,
                             keyword_only))
    return params


def _words(kind):
    """What a type of a pybind11 signature takes, in words."""
    inner = re.fullmatch(r"(?:Optional\[(.*)\]|(.*) \| None)", kind)
    if inner:
        return "None or " + _words(inner.group(1) or inner.group(2))
    listed = re.fullmatch(r"(?:List|list|Sequence)\[(.*)\]", kind)
    if listed:
        one = _words(listed.group(1))
        plural = {"True or False": "bools", "an int": "ints", "a number": "numbers",
                  "a str": "strs"}
        return "a list of " + plural.get(one, one)
    return {
        "bool": "True or False",
        "int": "an int",
        "float": "a number",
        "str": "a str",
        "os.PathLike": "a path (a str or an os.PathLike)",
        "dict": "a dict",
        "sequence": "a sequence (a list or a tuple)",
        "object": "any object",
    }.get(kind, "a " + kind.replace("ferry._ferry.", "ferry."))


def _is_number(value):
    return isinstance(value, numbers.Number) or hasattr(value, "__index__") or hasattr(
        value, "__float__")


def _fits(kind, value, ferry):
    """False where pybind11 surely refuses `value` for `kind`; True where it takes it, or where
    the type is not one this module knows."""
    inner = re.fullmatch(r"(?:Optional\[(.*)\]|(.*) \| None)", kind)
    if inner:
        return value is None or _fits(inner.group(1) or inner.group(2), value, ferry)
    listed = re.fullmatch(r"(?:List|list|Sequence)\[(.*)\]", kind)
    if listed:
        if isinstance(value, (str, bytes)):
            return False
        try:
            items = list(value)
        except TypeError:
            return False
        return all(_fits(listed.group(1), item, ferry) for item in items)
    if kind == "bool":
        # pybind11 converts None and numbers (their truth); not text, lists or other objects.
        return value is None or _is_number(value)
    if kind == "int":
        return not isinstance(value, float) and hasattr(value, "__index__")
    if kind == "float":
        return not isinstance(value, (str, bytes)) and _is_number(value)
    if kind == "str":
        return isinstance(value, (str, bytes))
    if kind == "dict":
        return isinstance(value, dict)
    if kind == "sequence":
        return not isinstance(value, (str, bytes, dict)) and hasattr(value, "__getitem__")
    if kind == "os.PathLike":
        return isinstance(value, (str, bytes)) or hasattr(value, "__fspath__")
    if kind.startswith("ferry._ferry."):
        cls = getattr(ferry, kind.rsplit(".", 1)[1], None)
        return cls is None or isinstance(value, cls)
    return True


def _shown(value):
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return "%s (%s)" % (text, type(value).__name__)


def explain(name, params, args, kwargs, ferry):
    """The error naming what is wrong with `name`(*args, **kwargs), a call that pybind11
    refused, or None where no argument can be blamed."""
    if params is None:
        return None
    by_name = {p.name: p for p in params}
    positional = [p for p in params if not p.keyword_only]

    # An option given by position.
    if len(args) > len(positional):
        extra = args[len(positional)]
        keyword = next((p for p in params[len(positional):] if _fits(p.kind, extra, ferry)),
                       None)
        takes = [p.name for p in positional]
        example = ""
        if keyword:
            example = ", as in %s(%s)" % (name, ", ".join(takes + ["%s=%r" % (keyword.name,
                                                                              extra)]))
        if not takes:
            return TypeError("%s: takes keyword arguments only%s" % (name, example))
        return TypeError(
            "%s: takes %d positional argument%s (%s); its options are keyword arguments%s" %
            (name, len(takes), "" if len(takes) == 1 else "s", ", ".join(takes), example))

    # A keyword that does not exist.
    for key in kwargs:
        if key in by_name:
            continue
        hint = _INSTEAD.get(name, {}).get(key)
        if hint is None and "height" in by_name:  # the image keywords' class
            hint = _INSTEAD["*"].get(key)
        close = difflib.get_close_matches(key, list(by_name), n=3)
        message = "%s: no keyword %s" % (name, key)
        if hint:
            message += "; use " + hint
        elif close:
            message += "; did you mean %s?" % " or ".join(c + "=" for c in close)
        message += ". %s takes: %s" % (name, ", ".join(p.name for p in params))
        return TypeError(message)

    given = {}
    for p, value in zip(positional, args):
        given[p.name] = value
    for key, value in kwargs.items():
        if key in given:
            return TypeError("%s: %s is given twice (by position and as a keyword)" % (name, key))
        given[key] = value
    for p in params:
        if p.default is None and p.name not in given:
            return TypeError("%s: %s is missing (%s)" % (name, p.name, _words(p.kind)))

    # A value of the wrong type.
    for p in params:
        if p.name in given and not _fits(p.kind, given[p.name], ferry):
            return TypeError("%s: %s is %s, not %s" % (name, p.name, _words(p.kind),
                                                      _shown(given[p.name])))
    # An int out of the C++ type's range: below 0 for an unsigned option, or too large.
    for p in params:
        value = given.get(p.name)
        if p.name not in _SIGNED and p.kind in ("int", "Optional[int]") and value is not None \
                and not isinstance(value, bool) and hasattr(value, "__index__"):
            least = _MINIMUM.get(p.name, 0)
            if value.__index__() < 0:
                return ValueError("%s: %s is an int >= %d, not %r" % (name, p.name, least, value))
    # Else the largest int past what a 32-bit option holds (a 64-bit one took it, or the call
    # would not have failed here).
    big = [(abs(given[p.name].__index__()), p.name) for p in params
           if p.kind in ("int", "Optional[int]") and given.get(p.name) is not None
           and hasattr(given[p.name], "__index__") and abs(given[p.name].__index__()) >= 1 << 31]
    if big:
        key = max(big)[1]
        return ValueError("%s: %s is out of its range: %r" % (name, key, given[key]))
    return None


def check_constructor(cls, ferry):
    """Makes `cls`'s constructor explain a call that pybind11 refuses (see explain())."""
    original = cls.__init__
    params = signature(original.__doc__)
    name = cls.__name__

    def __init__(self, *args, **kwargs):
        negative = negative_count(name, params, kwargs)
        if negative is not None:
            raise negative
        try:
            original(self, *args, **kwargs)
        except TypeError as e:
            if "incompatible constructor arguments" not in str(e):
                raise
            better = explain(name, params, args, kwargs, ferry)
            if better is None:
                raise
            raise better from None

    __init__.__doc__ = original.__doc__
    __init__.__qualname__ = name + ".__init__"
    cls.__init__ = __init__
