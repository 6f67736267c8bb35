from __future__ import annotations

import pytest

from gpufleet.gpu.catalog import DEFAULT_CATALOG, CatalogError, family_for, sanitise_product

REQUIRED = ["T4", "L4", "L40S", "A10", "A30", "A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB", "H100-NVL-94GB",
            "H200", "V100-16GB", "V100-32GB", "P100"]


def test_every_required_model_is_known_with_its_facts() -> None:
    for key in REQUIRED:
        m = DEFAULT_CATALOG.get(key)
        assert m.memory_mib > 10_000
        assert m.price_per_hour > 0
        assert m.family != "undefined"
    assert DEFAULT_CATALOG.get("H200").memory_mib // 1024 >= 140
    assert {m.key for m in DEFAULT_CATALOG if m.mig_capable} == {
        "A30", "A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB", "H100-NVL-94GB", "H200"}


def test_guide_prices_are_used_where_the_guide_gives_them() -> None:
    assert DEFAULT_CATALOG.get("T4").price_per_hour == 1.2
    assert DEFAULT_CATALOG.get("A100-SXM4-80GB").price_per_hour == 3.2
    assert DEFAULT_CATALOG.get("H100-SXM5-80GB").price_per_hour == 7.0
    assert DEFAULT_CATALOG.get("T4").price_source == "guide"
    assert DEFAULT_CATALOG.get("L40S").price_source == "estimate"


@pytest.mark.parametrize(("name", "key"), [
    ("NVIDIA-A100-SXM4-80GB", "A100-SXM4-80GB"),
    ("NVIDIA-A100-SXM4-80GB-MIG-3g.40gb", "A100-SXM4-80GB"),
    ("Tesla-T4-SHARED", "T4"),
    ("tesla t4", "T4"),
    ("NVIDIA-H100-80GB-HBM3", "H100-SXM5-80GB"),
    ("V100M32", "V100-32GB"),
    ("a100-40gb", "A100-SXM4-40GB"),
])
def test_lookup_by_product_label_alias_and_suffixes(name: str, key: str) -> None:
    found = DEFAULT_CATALOG.find(name)
    assert found is not None and found.key == key


def test_product_label_follows_gfd_sanitising() -> None:
    assert sanitise_product("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"
    assert sanitise_product("Tesla V100-SXM2-16GB (rev)") == "Tesla-V100-SXM2-16GB-rev"
    assert DEFAULT_CATALOG.get("T4").product == "Tesla-T4"


@pytest.mark.parametrize(("cc", "family"), [((7, 0), "volta"), ((7, 5), "turing"), ((8, 0), "ampere"),
                                            ((8, 6), "ampere"), ((8, 9), "ada-lovelace"), ((9, 0), "hopper"),
                                            ((6, 0), "pascal"), ((10, 0), "blackwell")])
def test_family_from_compute_capability(cc: tuple[int, int], family: str) -> None:
    assert family_for(*cc) == family


def test_unknown_model_needs_memory() -> None:
    with pytest.raises(CatalogError, match="no memory given"):
        DEFAULT_CATALOG.resolve("G2")
    g2 = DEFAULT_CATALOG.resolve("G2", memory_mib=32768)
    assert g2.memory_mib == 32768 and not g2.known and g2.price_per_hour == 0.0


def test_overrides_change_prices_and_add_models() -> None:
    cat = DEFAULT_CATALOG.with_overrides({"prices": {"T4": 0.5}, "models": [
        {"key": "G2", "memory": 32768, "compute": "7.0", "price": 2.5}]})
    assert cat.get("T4").price_per_hour == 0.5 and cat.get("T4").price_source == "user"
    assert cat.get("G2").family == "volta" and cat.get("G2").price_per_hour == 2.5
    assert DEFAULT_CATALOG.get("T4").price_per_hour == 1.2  # the default is untouched
    with pytest.raises(CatalogError, match="unknown GPU model"):
        DEFAULT_CATALOG.with_overrides({"prices": {"Z9": 1.0}})
    with pytest.raises(CatalogError, match="non-negative"):
        DEFAULT_CATALOG.with_overrides({"prices": {"T4": -1}})
