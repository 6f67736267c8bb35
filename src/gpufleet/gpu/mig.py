"""MIG (Multi-Instance GPU) geometry: profiles, placements and layout validation.

A MIG-capable GPU is divided into *memory slices* (8 on A100/H100/H200, 4 on A30). A GPU
instance of a given profile occupies a contiguous run of memory slices and may only start at
the indices NVML reports for that profile (``nvidia-smi mig -lgipp``). Compute slices are
paired with memory slices of the same index, except that memory slice 7 has no compute partner;
a profile's compute slices count against the GPU's total (7, or 4 on A30).

Everything here is pure data and arithmetic so that the scheduler, the simulator and the node
agent share one definition of "a valid layout".
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "GEOMETRIES",
    "MigError",
    "MigGeometry",
    "MigPlacement",
    "MigProfile",
    "ParsedProfileName",
    "canonical_profile_name",
    "check_layout",
    "enumerate_maximal_layouts",
    "format_profile_name",
    "free_starts",
    "geometry_for",
    "layout_mix",
    "mig_memory_gb",
    "pack_profiles",
    "parse_layout",
    "parse_placement",
    "parse_profile_name",
    "profile_from_resource_name",
    "resource_name_for_profile",
    "validate_layout",
]

RESOURCE_DOMAIN = "nvidia.com/"
LABEL_PREFIX = "mig-"
RESOURCE_PREFIX = RESOURCE_DOMAIN + LABEL_PREFIX
# Suffix the device plugin appends to time-sliced resources when renameByDefault is set.
_SHARED_SUFFIX = ".shared"

_MIB = 1024 * 1024
_GIB = 1024 * 1024 * 1024


class MigError(ValueError):
    """A MIG profile, placement or layout is not possible on a GPU model.

    ``problems`` holds the individual findings when several were collected (see
    :func:`check_layout`); the message is always self-contained.
    """

    def __init__(self, message: str, *, model: str | None = None, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.model = model
        self.problems: tuple[str, ...] = tuple(problems)


# --------------------------------------------------------------------------------------------
# Profile names
# --------------------------------------------------------------------------------------------

_NAME_RE = re.compile(
    r"(?:(?P<c>[1-9][0-9]*)c\.)?(?P<g>[1-9][0-9]*)g\.(?P<gb>[1-9][0-9]*)gb(?:(?P<sign>[+-])(?P<attrs>.*))?"
)
_ATTR_RE = re.compile(r"[a-z][a-z0-9]*(?:\.[a-z][a-z0-9]*)*")
# Resource names and GFD labels spell "+attr" as ".attr" because "+" is not allowed there.
_DOTTED_RE = re.compile(r"(?P<base>(?:[0-9]+c\.)?[0-9]+g\.[0-9]+gb)\.(?P<attrs>.+)")


@dataclass(frozen=True, slots=True)
class ParsedProfileName:
    """The parts of a MIG profile name such as ``1c.3g.40gb`` or ``1g.10gb+me``.

    ``compute`` is the compute-instance slice count when the name spells it (``Nc.``), else
    None, meaning "same as ``gpu_slices``". ``attributes`` follow ``+`` (or ``-`` when
    ``negated``), e.g. ``("me",)``, ``("me.all",)``, ``("gfx",)``.
    """

    compute: int | None
    gpu_slices: int
    memory_gb: int
    attributes: tuple[str, ...] = ()
    negated: bool = False


def parse_profile_name(text: str) -> ParsedProfileName:
    """Parse ``[Cc.]Gg.GBgb[+attr[,attr...]|-attr[,attr...]]`` (go-nvlib's grammar).

    Raises MigError for anything else, including a compute count larger than the GPU-slice
    count, empty or repeated attributes, and numbers with leading zeros.
    """
    match = _NAME_RE.fullmatch(text)
    if match is None:
        raise MigError(f"malformed MIG profile name {text!r}; expected e.g. '3g.40gb', '1c.3g.40gb' or '1g.10gb+me'")
    gpu_slices = int(match["g"])
    compute = int(match["c"]) if match["c"] is not None else None
    if compute is not None and compute > gpu_slices:
        raise MigError(
            f"malformed MIG profile name {text!r}: a compute instance cannot have more slices "
            f"({compute}c) than its GPU instance ({gpu_slices}g)"
        )
    attributes: tuple[str, ...] = ()
    if match["sign"] is not None:
        attributes = tuple(match["attrs"].split(","))
        bad = [a for a in attributes if not _ATTR_RE.fullmatch(a)]
        if bad:
            raise MigError(
                f"malformed MIG profile name {text!r}: invalid attribute(s) {bad}; "
                "attributes look like 'me', 'me.all' or 'gfx'"
            )
        if len(set(attributes)) != len(attributes):
            raise MigError(f"malformed MIG profile name {text!r}: repeated attribute")
    return ParsedProfileName(
        compute=compute,
        gpu_slices=gpu_slices,
        memory_gb=int(match["gb"]),
        attributes=attributes,
        negated=match["sign"] == "-",
    )


def format_profile_name(p: ParsedProfileName) -> str:
    """Canonical text of a parsed name; the ``Nc.`` part is omitted when it equals ``Ng``."""
    suffix = ""
    if p.attributes:
        suffix = ("-" if p.negated else "+") + ",".join(p.attributes)
    if p.compute is None or p.compute == p.gpu_slices:
        return f"{p.gpu_slices}g.{p.memory_gb}gb{suffix}"
    return f"{p.compute}c.{p.gpu_slices}g.{p.memory_gb}gb{suffix}"


def canonical_profile_name(text: str) -> str:
    """Normalise any common spelling of a profile to its canonical ``nvidia-smi`` name.

    Accepts ``1g.10gb+me``, ``1g.10gb.me`` (resource/label spelling), ``mig-1g.10gb.me`` and
    ``nvidia.com/mig-1g.10gb.me``; raises MigError when the text is not a profile name.
    """
    name = text.strip()
    if name.startswith(RESOURCE_DOMAIN):
        name = name[len(RESOURCE_DOMAIN) :]
    if name.startswith(LABEL_PREFIX):
        name = name[len(LABEL_PREFIX) :]
    dotted = _DOTTED_RE.fullmatch(name)
    if dotted is not None:
        name = f"{dotted['base']}+{dotted['attrs']}"
    return format_profile_name(parse_profile_name(name))


def resource_name_for_profile(profile: str) -> str:
    """Extended-resource name the device plugin's ``mixed`` strategy uses for a profile."""
    return RESOURCE_PREFIX + canonical_profile_name(profile).replace("+", ".")


def profile_from_resource_name(resource: str) -> str | None:
    """Inverse of :func:`resource_name_for_profile`; None if ``resource`` is not a MIG resource.

    A time-sliced ``.shared`` resource maps to the profile it shares.
    """
    if not resource.startswith(RESOURCE_PREFIX):
        return None
    rest = resource[len(RESOURCE_PREFIX) :]
    if rest.endswith(_SHARED_SUFFIX):
        rest = rest[: -len(_SHARED_SUFFIX)]
    try:
        return canonical_profile_name(rest)
    except MigError:
        return None


def mig_memory_gb(total_device_memory_bytes: int, mig_memory_mb: int) -> int:
    """The ``gb`` figure in a MIG profile name, computed the way go-nvlib names profiles.

    The instance's share of device memory is rounded *up* to the next eighth, then scaled by
    the device size in whole GiB (rounded up). Float arithmetic and round-half-away-from-zero
    deliberately mirror the Go implementation so names agree with the device plugin's.
    """
    if total_device_memory_bytes <= 0:
        raise ValueError(f"total device memory must be positive, got {total_device_memory_bytes}")
    if mig_memory_mb < 0:
        raise ValueError(f"MIG memory must not be negative, got {mig_memory_mb}")
    fraction = (float(mig_memory_mb) * _MIB) / float(total_device_memory_bytes)
    fraction = math.ceil(fraction * 8) / 8
    total_gb = float(-(-total_device_memory_bytes // _GIB))
    value = fraction * total_gb
    whole = math.floor(value)
    return whole + 1 if value - whole >= 0.5 else whole


# --------------------------------------------------------------------------------------------
# Profiles, placements, geometries
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU-instance profile of one GPU model (a row of ``nvidia-smi mig -lgip/-lgipp``)."""

    name: str
    compute_slices: int
    memory_slices: int
    memory_mib: int
    max_count: int
    starts: tuple[int, ...]
    media_extensions: bool
    profile_id: int | None
    multiprocessors: int | None

    @property
    def resource_name(self) -> str:
        return RESOURCE_DOMAIN + self.label_key

    @property
    def label_key(self) -> str:
        return LABEL_PREFIX + self.name.replace("+", ".")


@dataclass(frozen=True, slots=True, order=True)
class MigPlacement:
    """A GPU instance of ``profile`` whose first memory slice is ``start``."""

    profile: str
    start: int

    def __str__(self) -> str:
        return f"{self.profile}@{self.start}"


def parse_placement(text: str) -> MigPlacement:
    """Parse ``"3g.40gb@4"``. The profile name is kept as written (not canonicalised)."""
    profile, sep, start = text.strip().partition("@")
    profile = profile.strip()
    start = start.strip()
    if not sep or not profile or not re.fullmatch(r"[0-9]+", start):
        raise MigError(f"malformed MIG placement {text!r}; expected '<profile>@<start>', e.g. '3g.40gb@4'")
    return MigPlacement(profile, int(start))


@dataclass(frozen=True)
class MigGeometry:
    """The MIG profiles and placement space of one GPU model."""

    model: str
    memory_slices: int
    compute_slices: int
    profiles: tuple[MigProfile, ...]
    _by_name: Mapping[str, MigProfile] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, MigProfile] = {}
        for p in self.profiles:
            if p.name in by_name:
                raise ValueError(f"{self.model}: duplicate MIG profile {p.name}")
            if canonical_profile_name(p.name) != p.name:
                raise ValueError(f"{self.model}: profile name {p.name!r} is not canonical")
            if not p.starts or any(s < 0 or s + p.memory_slices > self.memory_slices for s in p.starts):
                raise ValueError(f"{self.model}: {p.name} starts {p.starts} do not fit in the memory slices")
            if p.compute_slices > self.compute_slices or p.max_count < 1:
                raise ValueError(f"{self.model}: {p.name} has impossible slice counts")
            by_name[p.name] = p
        object.__setattr__(self, "_by_name", MappingProxyType(by_name))

    @property
    def profile_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.profiles)

    def _lookup(self, name: str) -> MigProfile | None:
        try:
            return self._by_name.get(canonical_profile_name(name))
        except MigError:
            return None

    def profile(self, name: str) -> MigProfile:
        """The profile called ``name`` in any accepted spelling (see canonical_profile_name)."""
        found = self._lookup(name)
        if found is None:
            raise MigError(
                f"{self.model} has no MIG profile {name!r}; valid profiles are {', '.join(self.profile_names)}",
                model=self.model,
            )
        return found

    def has_profile(self, name: str) -> bool:
        return self._lookup(name) is not None


def _p(
    name: str,
    profile_id: int,
    compute: int,
    memory: int,
    max_count: int,
    starts: Iterable[int],
    mib: int,
    sms: int | None,
) -> MigProfile:
    return MigProfile(
        name=name,
        compute_slices=compute,
        memory_slices=memory,
        memory_mib=mib,
        max_count=max_count,
        starts=tuple(starts),
        media_extensions="+me" in name,
        profile_id=profile_id,
        multiprocessors=sms,
    )


_ONE = range(7)
_TWO_MEM = (0, 2, 4, 6)
_TWO = (0, 2, 4)
_FOUR = (0, 4)
_FULL = (0,)


def _seven_slice(model: str, names: Sequence[str], mib: Sequence[int], sms: Sequence[int | None]) -> MigGeometry:
    """A100/H100/H200 family: identical IDs and placements, per-model names/memory/SMs.

    ``names``/``mib``/``sms`` are ordered 1g, 1g+me, 1g (2 memory slices), 2g, 3g, 4g, 7g.
    """
    rows = (
        (19, 1, 1, 7, _ONE),
        (20, 1, 1, 1, _ONE),
        (15, 1, 2, 4, _TWO_MEM),
        (14, 2, 2, 3, _TWO),
        (9, 3, 4, 2, _FOUR),
        (5, 4, 4, 1, _FULL),
        (0, 7, 8, 1, _FULL),
    )
    profiles = tuple(
        _p(n, pid, c, m, mx, st, mem, sm) for n, (pid, c, m, mx, st), mem, sm in zip(names, rows, mib, sms, strict=True)
    )
    return MigGeometry(model=model, memory_slices=8, compute_slices=7, profiles=profiles)


# Memory figures: go-nvml's A100 mocks where given in MiB, otherwise nvidia-smi GiB * 1024.
# Inferred values (no capture in the reference): H100 NVL 2g.24gb/4g.47gb share the memory of
# the same-size 1g.24gb/3g.47gb; H200 1g.35gb shares 2g.35gb's; H200 3g/4g.71gb are half of
# 7g.141gb (true within 0.2% on every other model); +me profiles share their base profile's
# SM count. H200 placements/IDs are assumed equal to H100's (identical fractions).
_CATALOG: tuple[MigGeometry, ...] = (
    _seven_slice(
        "A100-SXM4-40GB",
        ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
        (4864, 4864, 9856, 9856, 19968, 19968, 40192),
        (14, 14, 14, 28, 42, 56, 98),
    ),
    _seven_slice(
        "A100-SXM4-80GB",
        ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
        (9856, 9856, 19968, 19968, 40192, 40192, 80384),
        (14, 14, 14, 28, 42, 56, 98),
    ),
    MigGeometry(
        model="A30",
        memory_slices=4,
        compute_slices=4,
        profiles=(
            _p("1g.6gb", 14, 1, 1, 4, (0, 1, 2, 3), 5949, 14),
            _p("1g.6gb+me", 21, 1, 1, 1, (0, 1, 2, 3), 5949, 14),
            _p("2g.12gb", 5, 2, 2, 2, (0, 2), 11971, 28),
            _p("2g.12gb+me", 6, 2, 2, 1, (0, 2), 11971, 28),
            _p("4g.24gb", 0, 4, 4, 1, (0,), 24003, 56),
        ),
    ),
    _seven_slice(
        "H100-SXM5-80GB",
        ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
        (9984, 9984, 20091, 20091, 40448, 40448, 81152),
        (16, 16, 26, 32, 60, 64, 132),
    ),
    _seven_slice(
        "H100-NVL-94GB",
        ("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
        (10854, 10854, 22016, 22016, 47206, 47206, 94822),
        (16, 16, 26, 32, 60, 64, 132),
    ),
    _seven_slice(
        "H200",
        ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
        (16384, 16384, 33280, 33280, 71680, 71680, 143360),
        (16, 16, None, 32, 60, 64, 132),
    ),
)

GEOMETRIES: Mapping[str, MigGeometry] = MappingProxyType({g.model: g for g in _CATALOG})

# Other spellings of the catalog models, after _normalise_model: NVML product names as GFD
# sanitises them, and SKUs that share a geometry (PCIe A100s, H200 NVL).
_MODEL_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "A100-SXM4-40GB": "A100-SXM4-40GB",
        "A100-PCIE-40GB": "A100-SXM4-40GB",
        "A100-SXM4-80GB": "A100-SXM4-80GB",
        "A100-80GB-PCIE": "A100-SXM4-80GB",
        "A100-PCIE-80GB": "A100-SXM4-80GB",
        "A30": "A30",
        "A30-24GB": "A30",
        "H100-SXM5-80GB": "H100-SXM5-80GB",
        "H100-80GB-HBM3": "H100-SXM5-80GB",
        "H100-NVL-94GB": "H100-NVL-94GB",
        "H100-NVL": "H100-NVL-94GB",
        "H200": "H200",
        "H200-NVL": "H200",
        "H200-141GB": "H200",
    }
)


def _normalise_model(model: str) -> str:
    name = re.sub(r"[\s_]+", "-", model.strip()).upper()
    name = re.sub(r"-MIG-.*$", "", name)
    name = name.removesuffix("-SHARED")
    return name.removeprefix("NVIDIA-")


def geometry_for(model: str) -> MigGeometry | None:
    """The geometry for a catalog key or a recognised product name, else None.

    Accepts e.g. ``"A100-SXM4-80GB"``, ``"NVIDIA A100-SXM4-80GB"``, ``"NVIDIA-H100-80GB-HBM3"``
    and GFD single-strategy products like ``"NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"``.
    """
    exact = GEOMETRIES.get(model)
    if exact is not None:
        return exact
    key = _MODEL_ALIASES.get(_normalise_model(model))
    return GEOMETRIES[key] if key is not None else None


# --------------------------------------------------------------------------------------------
# Layouts
# --------------------------------------------------------------------------------------------


def _mask(profile: MigProfile, start: int) -> int:
    return ((1 << profile.memory_slices) - 1) << start


def _slices_text(profile: MigProfile, start: int) -> str:
    end = start + profile.memory_slices - 1
    return f"memory slice {start}" if end == start else f"memory slices {start}-{end}"


def _or_list(items: Sequence[int]) -> str:
    words = [str(i) for i in items]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def validate_layout(geometry: MigGeometry, layout: Sequence[MigPlacement]) -> list[str]:
    """Every problem with ``layout`` on ``geometry``, as sentences; empty when it is valid.

    Checks: known profile, allowed start, no two instances sharing a memory slice, per-profile
    instance limit, at most one media-extension (+me) instance on the GPU, and the total
    compute slices. Profile names may use any spelling accepted by ``MigGeometry.profile``.
    """
    model = geometry.model
    problems: list[str] = []
    resolved: list[tuple[MigPlacement, MigProfile]] = []
    for placement in layout:
        prof = geometry._lookup(placement.profile)
        if prof is None:
            problems.append(
                f"{model} has no MIG profile {placement.profile!r} (in {placement}); "
                f"use one of {', '.join(geometry.profile_names)}."
            )
            continue
        resolved.append((placement, prof))
        if placement.start not in prof.starts:
            problems.append(
                f"{placement} is not a valid placement on {model}: {prof.name} can only start at "
                f"memory slice {_or_list(prof.starts)}."
            )

    # Only placements at legal starts take part in the overlap check: an illegal one cannot
    # exist, so reporting what it would collide with only adds noise.
    placed = [(pl, pr) for pl, pr in resolved if pl.start in pr.starts]
    for i, (a, pa) in enumerate(placed):
        for b, pb in placed[i + 1 :]:
            if _mask(pa, a.start) & _mask(pb, b.start):
                problems.append(
                    f"{a} ({_slices_text(pa, a.start)}) overlaps {b} ({_slices_text(pb, b.start)}) "
                    f"on {model}; move or remove one of them."
                )

    counts = Counter(pr.name for _, pr in resolved)
    for prof in geometry.profiles:
        n = counts.get(prof.name, 0)
        if n > prof.max_count:
            problems.append(
                f"{model} allows at most {_plural(prof.max_count, 'instance')} of {prof.name} "
                f"but the layout has {n}; remove {n - prof.max_count}."
            )

    # The GPU has a single set of media engines beyond the per-slice decoders (one OFA, one
    # JPEG on A30), and a +me instance takes all of them, so two +me instances of *different*
    # profiles (possible on A30) cannot coexist either.
    # Two of the same +me profile are already reported by the count check above.
    me = [(pl, pr) for pl, pr in resolved if pr.media_extensions]
    if len({pr.name for _, pr in me}) > 1:
        problems.append(
            f"{model} supports at most one media-extension (+me) instance but the layout has "
            f"{len(me)} ({', '.join(str(pl) for pl, _ in me)}); keep only one."
        )

    used = sum(pr.compute_slices for _, pr in resolved)
    if used > geometry.compute_slices:
        problems.append(
            f"The layout uses {used} compute slices but {model} has only {geometry.compute_slices}; "
            "remove or shrink instances."
        )
    return problems


def check_layout(geometry: MigGeometry, layout: Sequence[MigPlacement]) -> None:
    """Raise MigError listing every problem if ``layout`` is not valid on ``geometry``."""
    problems = validate_layout(geometry, layout)
    if problems:
        shown = ", ".join(map(str, layout)) or "(empty)"
        raise MigError(
            f"invalid MIG layout [{shown}] for {geometry.model}: " + " ".join(problems),
            model=geometry.model,
            problems=problems,
        )


def layout_mix(layout: Iterable[MigPlacement]) -> dict[str, int]:
    """How many instances of each profile a layout has, keyed by profile name (sorted)."""
    counts = Counter(p.profile for p in layout)
    return {name: counts[name] for name in sorted(counts)}


def _sort_layout(layout: Iterable[MigPlacement]) -> tuple[MigPlacement, ...]:
    return tuple(sorted(layout, key=lambda p: (p.start, p.profile)))


class _State:
    """Incremental bookkeeping of a layout under construction, for the searches below."""

    __slots__ = ("compute", "counts", "geometry", "mask", "me")

    def __init__(self, geometry: MigGeometry) -> None:
        self.geometry = geometry
        self.mask = 0
        self.compute = 0
        self.me = 0
        self.counts: Counter[str] = Counter()

    def fits(self, prof: MigProfile, start: int) -> bool:
        return (
            start in prof.starts
            and not self.mask & _mask(prof, start)
            and self.counts[prof.name] < prof.max_count
            and not (prof.media_extensions and self.me)
            and self.compute + prof.compute_slices <= self.geometry.compute_slices
        )

    def add(self, prof: MigProfile, start: int) -> None:
        self.mask |= _mask(prof, start)
        self.compute += prof.compute_slices
        self.me += prof.media_extensions
        self.counts[prof.name] += 1

    def remove(self, prof: MigProfile, start: int) -> None:
        self.mask &= ~_mask(prof, start)
        self.compute -= prof.compute_slices
        self.me -= prof.media_extensions
        self.counts[prof.name] -= 1


def _resolve_profiles(geometry: MigGeometry, names: Iterable[str]) -> list[MigProfile]:
    unique: dict[str, MigProfile] = {}
    for name in names:
        prof = geometry.profile(name)
        unique[prof.name] = prof
    return list(unique.values())


def enumerate_maximal_layouts(
    geometry: MigGeometry, profiles: Sequence[str] | None = None
) -> list[tuple[MigPlacement, ...]]:
    """Every valid layout of the allowed profiles that no further allowed instance fits into.

    ``profiles`` defaults to every profile without media extensions. Layouts are tuples sorted
    by start; the list is sorted by the layouts' (start, profile) sequences.
    """
    allowed = (
        _resolve_profiles(geometry, profiles)
        if profiles is not None
        else [p for p in geometry.profiles if not p.media_extensions]
    )
    candidates = sorted(((s, pr) for pr in allowed for s in pr.starts), key=lambda c: (c[0], c[1].name))
    state = _State(geometry)
    chosen: list[tuple[int, MigProfile]] = []
    found: list[tuple[MigPlacement, ...]] = []

    def search(index: int) -> None:
        # Each valid layout is visited exactly once (candidates are taken in increasing order);
        # it is kept when no candidate at all, earlier ones included, still fits.
        if not any(state.fits(pr, s) for s, pr in candidates):
            found.append(_sort_layout(MigPlacement(pr.name, s) for s, pr in chosen))
            return
        for i in range(index, len(candidates)):
            s, pr = candidates[i]
            if state.fits(pr, s):
                state.add(pr, s)
                chosen.append((s, pr))
                search(i + 1)
                chosen.pop()
                state.remove(pr, s)

    search(0)
    found.sort(key=lambda lay: [(p.start, p.profile) for p in lay])
    return found


def pack_profiles(geometry: MigGeometry, counts: Mapping[str, int]) -> tuple[MigPlacement, ...] | None:
    """Choose starts for exactly ``counts`` instances per profile, or None if impossible.

    Larger instances are placed first, each at the lowest start that still lets the rest fit
    (depth-first search), so the answer is deterministic. Unknown profiles or negative counts
    raise MigError; they are mistakes, not capacity questions.
    """
    wanted: Counter[str] = Counter()
    for name, n in counts.items():
        prof = geometry.profile(name)
        if n < 0:
            raise MigError(f"negative count {n} for {prof.name} on {geometry.model}", model=geometry.model)
        wanted[prof.name] += n
    order = sorted(
        (geometry.profile(name) for name in wanted if wanted[name]),
        key=lambda p: (-p.memory_slices, -p.compute_slices, p.name),
    )
    instances = [prof for prof in order for _ in range(wanted[prof.name])]
    if (
        any(wanted[p.name] > p.max_count for p in order)
        or sum(p.compute_slices for p in instances) > geometry.compute_slices
        or sum(p.memory_slices for p in instances) > geometry.memory_slices
    ):
        return None

    state = _State(geometry)
    starts: list[int] = []

    def search(i: int) -> bool:
        if i == len(instances):
            return True
        prof = instances[i]
        # Instances of one profile are interchangeable: insisting on increasing starts avoids
        # trying every permutation of the same set.
        lowest = starts[-1] + 1 if i > 0 and instances[i - 1] is prof else 0
        for s in prof.starts:
            if s >= lowest and state.fits(prof, s):
                state.add(prof, s)
                starts.append(s)
                if search(i + 1):
                    return True
                starts.pop()
                state.remove(prof, s)
        return False

    if not search(0):
        return None
    return _sort_layout(MigPlacement(p.name, s) for p, s in zip(instances, starts, strict=True))


def free_starts(geometry: MigGeometry, layout: Sequence[MigPlacement], profile: str) -> list[int]:
    """Starts at which one more ``profile`` instance could be created next to ``layout``.

    Only conflicts the new instance itself would cause are considered; problems the existing
    layout already has (see validate_layout) do not hide free space elsewhere.
    """
    prof = geometry.profile(profile)
    state = _State(geometry)
    for placement in layout:
        existing = geometry._lookup(placement.profile)
        if existing is None:
            continue
        # Bypass fits(): the existing layout is taken as given even where it is invalid.
        state.add(existing, placement.start)
    return [s for s in prof.starts if state.fits(prof, s)]


def parse_layout(text: str, geometry: MigGeometry) -> tuple[MigPlacement, ...]:
    """Parse a layout for ``geometry`` and return it validated, sorted by start.

    Two forms are accepted (not mixed): explicit ``"3g.40gb@0,3g.40gb@4"``, or counts
    ``"3g.40gb:2,1g.10gb"`` / ``"3g.40gb,3g.40gb"``, whose starts are chosen by
    :func:`pack_profiles`. Profile names are canonicalised; blank text is the empty layout.
    """
    tokens = [t.strip() for t in text.split(",")]
    if tokens == [""]:
        return ()
    if any(not t for t in tokens):
        raise MigError(f"empty entry in MIG layout {text!r} for {geometry.model}", model=geometry.model)
    explicit = ["@" in t for t in tokens]
    if any(explicit) and not all(explicit):
        raise MigError(
            f"MIG layout {text!r} for {geometry.model} mixes 'profile@start' and count entries; "
            "give a start for every entry or for none",
            model=geometry.model,
        )
    if all(explicit):
        layout = []
        for token in tokens:
            placement = parse_placement(token)
            prof = geometry.profile(placement.profile)
            layout.append(MigPlacement(prof.name, placement.start))
        check_layout(geometry, layout)
        return _sort_layout(layout)

    counts: Counter[str] = Counter()
    for token in tokens:
        name, sep, num = token.partition(":")
        num = num.strip()
        # Two digits at most: no GPU holds more than 7 instances, and a huge count must not become a huge int.
        if sep and not re.fullmatch(r"[0-9]{1,2}", num):
            raise MigError(
                f"bad count {num!r} in MIG layout entry {token!r} for {geometry.model}; "
                "use '<profile>:<count>', e.g. '3g.40gb:2'",
                model=geometry.model,
            )
        counts[geometry.profile(name.strip()).name] += int(num) if sep else 1
    packed = pack_profiles(geometry, counts)
    if packed is None:
        wanted = ", ".join(f"{name}:{n}" for name, n in sorted(counts.items()) if n)
        raise MigError(
            f"{wanted} cannot be placed together on one {geometry.model}; "
            f"use fewer or smaller instances (`gpufleet mig layouts {geometry.model}` lists what fits)",
            model=geometry.model,
        )
    return packed
