"""What GPU models are: memory, family, compute capability, MIG support, NVLink and an hourly price.

The catalog is data. Each model has a short key used in gpufleet's own manifests (``A100-SXM4-80GB``), the
product label value GPU Feature Discovery publishes for it (``NVIDIA-A100-SXM4-80GB``: the NVML name with
characters outside ``[A-Za-z0-9-_. ]`` removed and spaces turned into dashes), and aliases users write
(``a100-80gb``, the openb trace's ``V100M32``). Models the catalog does not know are accepted when the caller
gives their memory (:meth:`Catalog.resolve`), which is how the openb trace's undisclosed ``G2`` runs.

Prices are per GPU-hour in CHF. The guide gives T4 1.2, A100 3.2 and H100 7.0; the others are estimates in
the same currency, marked ``price_source="estimate"``: a public on-demand price per GPU (AWS us-east-1, the
smallest instance of each GPU; GCP's GPU price ratio to the T4 for the P100, which AWS no longer sells)
placed on the guide's scale by log-interpolation between its T4 (g4dn, $0.526) and A100 (p4de, $5.12 per
GPU) anchors, ``1.2 · (usd / 0.526) ** 0.432``: L4 ($0.805) 1.45, A10 ($1.006) 1.6, L40S ($1.861) 2.1, P100
(4.2 × T4) 2.2, V100-16GB ($3.06) 2.55, V100-32GB ($3.90) 2.85, A100-40GB ($4.10) 2.9; A30, H100 NVL and H200
are set between their neighbours. Only the order matters to the cheapest-model placement rule, and that
order is the clouds' one. A user overrides any of them from a YAML file (:meth:`Catalog.with_overrides`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

PriceSource = Literal["guide", "estimate", "user", "unknown"]


class CatalogError(ValueError):
    """An unknown model, or a malformed override; the message says how to fix it."""


class AmbiguousModelError(CatalogError):
    """A name several models share (``A100``: the 40 GB and the 80 GB part) that is none's own name or alias."""

    def __init__(self, name: str, choices: Sequence[str]) -> None:
        self.name = name
        self.choices = tuple(choices)
        super().__init__(f"GPU model {name!r} names {len(self.choices)} models: {', '.join(self.choices)}; give one "
                         "of them")


@dataclass(frozen=True, slots=True)
class GpuModel:
    key: str
    product: str  # the nvidia.com/gpu.product label value GFD writes for the unshared GPU
    nvml_name: str
    memory_mib: int
    compute_major: int
    compute_minor: int
    mig_capable: bool
    nvlink: bool
    nvlinks_per_pair: int  # NVLinks between two GPUs of an 8-GPU board (0 without NVLink)
    price_per_hour: float
    price_source: PriceSource
    aliases: tuple[str, ...] = ()

    @property
    def family(self) -> str:
        return family_for(self.compute_major, self.compute_minor)

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024

    @property
    def known(self) -> bool:
        return self.price_source != "unknown"


def family_for(major: int, minor: int) -> str:
    """GFD's ``nvidia.com/gpu.family`` value for a compute capability."""
    if major < 1:
        return "undefined"
    if major == 2:
        return "fermi"
    if major == 3:
        return "kepler"
    if major == 5:
        return "maxwell"
    if major == 6:
        return "pascal"
    if major == 7:
        return "turing" if minor >= 5 else "volta"
    if major == 8:
        return "ada-lovelace" if minor >= 9 else "ampere"
    if major == 9:
        return "hopper"
    if major in (10, 12):
        return "blackwell"
    if major == 13:
        return "rubin"
    return "undefined"


def sanitise_product(nvml_name: str) -> str:
    """GFD's product label rule: drop characters outside [A-Za-z0-9-_. ], spaces become dashes."""
    kept = re.sub(r"[^A-Za-z0-9\-_. ]", "", nvml_name)
    return kept.replace(" ", "-")


def _m(
    key: str,
    nvml_name: str,
    memory_mib: int,
    cc: tuple[int, int],
    *,
    mig: bool = False,
    nvlinks: int = 0,
    price: float,
    source: PriceSource,
    aliases: Iterable[str] = (),
) -> GpuModel:
    return GpuModel(
        key=key,
        product=sanitise_product(nvml_name),
        nvml_name=nvml_name,
        memory_mib=memory_mib,
        compute_major=cc[0],
        compute_minor=cc[1],
        mig_capable=mig,
        nvlink=nvlinks > 0,
        nvlinks_per_pair=nvlinks,
        price_per_hour=price,
        price_source=source,
        aliases=tuple(aliases),
    )


# Memory figures are what NVML reports (MiB) where the reference records them, else the board's nominal size.
BUILTIN_MODELS: tuple[GpuModel, ...] = (
    _m("T4", "Tesla T4", 15360, (7, 5), price=1.2, source="guide", aliases=("tesla-t4",)),
    _m("L4", "NVIDIA L4", 23034, (8, 9), price=1.45, source="estimate"),
    _m("L40S", "NVIDIA L40S", 46068, (8, 9), price=2.1, source="estimate", aliases=("l40s-48gb",)),
    _m("A10", "NVIDIA A10", 23028, (8, 6), price=1.6, source="estimate"),
    _m("A30", "NVIDIA A30", 24576, (8, 0), mig=True, nvlinks=4, price=1.8, source="estimate",
       aliases=("a30-24gb",)),
    _m("A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", 40960, (8, 0), mig=True, nvlinks=12, price=2.9,
       source="estimate", aliases=("a100-40gb", "a100-sxm4-40gb")),
    _m("A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", 81920, (8, 0), mig=True, nvlinks=12, price=3.2,
       source="guide", aliases=("a100-80gb",)),  # not "a100": the 40 GB part is one too
    _m("H100-SXM5-80GB", "NVIDIA H100 80GB HBM3", 81559, (9, 0), mig=True, nvlinks=18, price=7.0,
       source="guide", aliases=("h100", "h100-80gb", "h100-sxm5")),
    _m("H100-NVL-94GB", "NVIDIA H100 NVL", 95830, (9, 0), mig=True, nvlinks=12, price=7.5,
       source="estimate", aliases=("h100-nvl", "h100-94gb")),
    _m("H200", "NVIDIA H200", 143771, (9, 0), mig=True, nvlinks=18, price=9.5, source="estimate",
       aliases=("h200-141gb",)),
    _m("V100-16GB", "Tesla V100-SXM2-16GB", 16160, (7, 0), nvlinks=6, price=2.55, source="estimate",
       aliases=("v100m16", "v100-sxm2-16gb", "v100")),
    _m("V100-32GB", "Tesla V100-SXM2-32GB", 32510, (7, 0), nvlinks=6, price=2.85, source="estimate",
       aliases=("v100m32", "v100-sxm2-32gb")),
    _m("P100", "Tesla P100-PCIE-16GB", 16280, (6, 0), price=2.2, source="estimate",
       aliases=("p100-16gb",)),
)


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def _bare(normed: str) -> str:
    """A normalised name without what a product label adds: the vendor, -SHARED, -MIG-<profile>."""
    normed = re.sub(r"-shared$", "", re.sub(r"-mig-.*$", "", normed))
    return normed.removeprefix("nvidia-").removeprefix("tesla-")


class Catalog:
    """A lookup of GPU models by key, GFD product label or alias (case-insensitive)."""

    def __init__(self, models: Iterable[GpuModel]) -> None:
        self._models: dict[str, GpuModel] = {}
        self._index: dict[str, str] = {}
        for model in models:
            self._add(model)

    def _add(self, model: GpuModel) -> None:
        self._models[model.key] = model
        for name in (model.key, model.product, model.nvml_name, *model.aliases):
            self._index[_norm(name)] = model.key

    def __iter__(self) -> Iterator[GpuModel]:
        return iter(self._models.values())

    def __len__(self) -> int:
        return len(self._models)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.find(name) is not None

    def find(self, name: str) -> GpuModel | None:
        """The model a key, alias or product label names; product suffixes -SHARED and -MIG-... are ignored."""
        normed = _norm(name)
        key = self._index.get(normed)
        if key is None:
            stripped = re.sub(r"-mig-.*$", "", normed)
            stripped = re.sub(r"-shared$", "", stripped)
            key = self._index.get(stripped)
        return self._models.get(key) if key is not None else None

    def shared_by(self, name: str) -> list[str]:
        """The models whose names begin with ``name`` as a whole word (``A100``: A100-SXM4-40GB and
        A100-SXM4-80GB; ``V100-SXM2``: both V100s), when it is none's own name or alias; else nothing."""
        if self.find(name) is not None:
            return []
        given = _bare(_norm(name))
        if not given:
            return []
        return [m.key for m in self if any(n == given or n.startswith(given + "-") for n in (
            _bare(_norm(x)) for x in (m.key, m.product, m.nvml_name, *m.aliases)))]

    def lookup(self, name: str) -> GpuModel | None:
        """The one rule for a model's name: a key, product label, NVML name or declared alias names its model
        (``h100`` is H100-SXM5-80GB's alias); any other name several models share is an
        :class:`AmbiguousModelError` listing them (``A100``); a name nobody answers to is None."""
        model = self.find(name)
        if model is not None:
            return model
        choices = self.shared_by(name)
        if len(choices) > 1:
            raise AmbiguousModelError(name, choices)
        return None

    def get(self, name: str) -> GpuModel:
        model = self.lookup(name)
        if model is None:
            known = ", ".join(sorted(self._models))
            raise CatalogError(
                f"unknown GPU model {name!r}; known models: {known}. "
                "Give the model's memory (gpu.memory in a NodePool) to use a model the catalog does not know."
            )
        return model

    def resolve(self, name: str, memory_mib: int | None = None) -> GpuModel:
        """A known model (:meth:`lookup`: a name several models share is an error, memory given or not), or an
        ad-hoc one when its memory is given (the trace's ``G2``)."""
        model = self.lookup(name)
        if model is not None:
            if memory_mib is not None and memory_mib != model.memory_mib:
                return replace(model, memory_mib=memory_mib)
            return model
        if memory_mib is None or memory_mib <= 0:
            raise CatalogError(
                f"unknown GPU model {name!r} and no memory given; add its memory in MiB "
                "(for example gpu.memory: 32Gi) or use one of: " + ", ".join(sorted(self._models))
            )
        return GpuModel(
            key=name,
            product=sanitise_product(name),
            nvml_name=name,
            memory_mib=memory_mib,
            compute_major=0,
            compute_minor=0,
            mig_capable=False,
            nvlink=False,
            nvlinks_per_pair=0,
            price_per_hour=0.0,
            price_source="unknown",
        )

    def price(self, name: str) -> float:
        model = self.find(name)
        return model.price_per_hour if model is not None else 0.0

    def known_price(self, name: str) -> float | None:
        """The model's price, or None when nobody gave one (a model the catalog does not know, or an ad-hoc
        one): such a model is neither cheaper nor dearer than another."""
        model = self.find(name)
        return model.price_per_hour if model is not None and model.known else None

    def with_overrides(self, data: Mapping[str, Any], origin: str = "<overrides>") -> Catalog:
        """A new catalog with prices changed and models added.

        Accepted shape (YAML)::

            prices: {A100-SXM4-80GB: 3.5, T4: 0.9}
            models:
            - {key: G2, memory: 32768, family: volta, price: 2.0}
        """
        models = {m.key: m for m in self._models.values()}
        for name, value in (data.get("prices") or {}).items():
            model = self.find(str(name))
            if model is None:
                raise CatalogError(f"{origin}: prices.{name}: unknown GPU model; add it under models: first")
            models[model.key] = replace(model, price_per_hour=_price(value, f"{origin}: prices.{name}"),
                                        price_source="user")
        for i, entry in enumerate(data.get("models") or []):
            where = f"{origin}: models[{i}]"
            if not isinstance(entry, Mapping) or "key" not in entry or "memory" not in entry:
                raise CatalogError(f"{where}: each model needs at least key and memory (MiB)")
            memory = entry["memory"]
            if not isinstance(memory, int) or memory <= 0:
                raise CatalogError(f"{where}.memory: give the memory in MiB as a positive integer")
            major, minor = _compute(entry.get("compute", "0.0"), where)
            key = str(entry["key"])
            models[key] = GpuModel(
                key=key,
                product=str(entry.get("product", sanitise_product(key))),
                nvml_name=str(entry.get("nvmlName", key)),
                memory_mib=memory,
                compute_major=major,
                compute_minor=minor,
                mig_capable=bool(entry.get("migCapable", False)),
                nvlink=int(entry.get("nvlinksPerPair", 0)) > 0,
                nvlinks_per_pair=int(entry.get("nvlinksPerPair", 0)),
                price_per_hour=_price(entry.get("price", 0.0), where + ".price"),
                price_source="user",
                aliases=tuple(str(a) for a in entry.get("aliases", ())),
            )
        return Catalog(models.values())


def _price(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise CatalogError(f"{where}: a price is a non-negative number per GPU-hour, got {value!r}")
    return float(value)


def _compute(value: object, where: str) -> tuple[int, int]:
    match = re.fullmatch(r"(\d+)\.(\d+)", str(value))
    if match is None:
        raise CatalogError(f"{where}.compute: write the compute capability as MAJOR.MINOR, e.g. 8.0")
    return int(match.group(1)), int(match.group(2))


DEFAULT_CATALOG = Catalog(BUILTIN_MODELS)
