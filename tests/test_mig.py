"""Tests for gpufleet.gpu.mig: catalog, names, layout validation, enumeration and packing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.gpu.mig import (
    GEOMETRIES,
    MigError,
    MigGeometry,
    MigPlacement,
    MigProfile,
    ParsedProfileName,
    canonical_profile_name,
    check_layout,
    enumerate_maximal_layouts,
    format_profile_name,
    free_starts,
    geometry_for,
    layout_mix,
    mig_memory_gb,
    pack_profiles,
    parse_layout,
    parse_placement,
    parse_profile_name,
    profile_from_resource_name,
    resource_name_for_profile,
    validate_layout,
)

A100_40 = GEOMETRIES["A100-SXM4-40GB"]
A100_80 = GEOMETRIES["A100-SXM4-80GB"]
A30 = GEOMETRIES["A30"]
H100 = GEOMETRIES["H100-SXM5-80GB"]
H100_NVL = GEOMETRIES["H100-NVL-94GB"]
H200 = GEOMETRIES["H200"]

A100_BASE = ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]

MIB = 1024 * 1024
GIB = 1024 * MIB
# Total device memory NVML reports, used to check that catalog memory reproduces the names.
# A30, H100 and H200 figures are captures quoted in the reference; the others are nominal.
DEVICE_MEMORY_BYTES = {
    "A100-SXM4-40GB": 40 * GIB,
    "A100-SXM4-80GB": 80 * GIB,
    "A30": 24576 * MIB,
    "H100-SXM5-80GB": 81559 * MIB,
    "H100-NVL-94GB": 94 * GIB,
    "H200": 143771 * MIB,
}


def P(text: str) -> MigPlacement:
    return parse_placement(text)


def mixes(layouts: list[tuple[MigPlacement, ...]]) -> set[frozenset[tuple[str, int]]]:
    return {frozenset(layout_mix(layout).items()) for layout in layouts}


def overlaps(geometry: MigGeometry, layout: tuple[MigPlacement, ...] | list[MigPlacement]) -> bool:
    used: set[int] = set()
    for placement in layout:
        size = geometry.profile(placement.profile).memory_slices
        slices = set(range(placement.start, placement.start + size))
        if used & slices:
            return True
        used |= slices
    return False


# ------------------------------------------------------------------------------------------
# Catalog
# ------------------------------------------------------------------------------------------


def test_catalog_keys_and_slice_counts() -> None:
    assert set(GEOMETRIES) == {
        "A100-SXM4-40GB",
        "A100-SXM4-80GB",
        "A30",
        "H100-SXM5-80GB",
        "H100-NVL-94GB",
        "H200",
    }
    for key, geometry in GEOMETRIES.items():
        assert geometry.model == key
        expected = (4, 4) if key == "A30" else (8, 7)
        assert (geometry.memory_slices, geometry.compute_slices) == expected


@pytest.mark.parametrize(
    ("model", "names"),
    [
        ("A100-SXM4-40GB", "1g.5gb 1g.5gb+me 1g.10gb 2g.10gb 3g.20gb 4g.20gb 7g.40gb"),
        ("A100-SXM4-80GB", "1g.10gb 1g.10gb+me 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb"),
        ("A30", "1g.6gb 1g.6gb+me 2g.12gb 2g.12gb+me 4g.24gb"),
        ("H100-SXM5-80GB", "1g.10gb 1g.10gb+me 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb"),
        ("H100-NVL-94GB", "1g.12gb 1g.12gb+me 1g.24gb 2g.24gb 3g.47gb 4g.47gb 7g.94gb"),
        ("H200", "1g.18gb 1g.18gb+me 1g.35gb 2g.35gb 3g.71gb 4g.71gb 7g.141gb"),
    ],
)
def test_catalog_profile_names(model: str, names: str) -> None:
    assert GEOMETRIES[model].profile_names == tuple(names.split())


def test_a100_table_rows() -> None:
    rows = {
        p.name: (p.profile_id, p.compute_slices, p.memory_slices, p.max_count, p.starts, p.memory_mib)
        for p in A100_40.profiles
    }
    assert rows == {
        "1g.5gb": (19, 1, 1, 7, (0, 1, 2, 3, 4, 5, 6), 4864),
        "1g.5gb+me": (20, 1, 1, 1, (0, 1, 2, 3, 4, 5, 6), 4864),
        "1g.10gb": (15, 1, 2, 4, (0, 2, 4, 6), 9856),
        "2g.10gb": (14, 2, 2, 3, (0, 2, 4), 9856),
        "3g.20gb": (9, 3, 4, 2, (0, 4), 19968),
        "4g.20gb": (5, 4, 4, 1, (0,), 19968),
        "7g.40gb": (0, 7, 8, 1, (0,), 40192),
    }
    assert A100_40.profile("7g.40gb").multiprocessors == 98


def test_a30_table_rows() -> None:
    rows = {p.name: (p.profile_id, p.compute_slices, p.memory_slices, p.max_count, p.starts) for p in A30.profiles}
    assert rows == {
        "1g.6gb": (14, 1, 1, 4, (0, 1, 2, 3)),
        "1g.6gb+me": (21, 1, 1, 1, (0, 1, 2, 3)),
        "2g.12gb": (5, 2, 2, 2, (0, 2)),
        "2g.12gb+me": (6, 2, 2, 1, (0, 2)),
        "4g.24gb": (0, 4, 4, 1, (0,)),
    }


def test_h100_sm_counts_differ_from_a100() -> None:
    assert [p.multiprocessors for p in H100.profiles] == [16, 16, 26, 32, 60, 64, 132]
    assert H100.profile("7g.80gb").memory_mib == 81152


@pytest.mark.parametrize("model", sorted(GEOMETRIES))
def test_catalog_memory_reproduces_profile_names(model: str) -> None:
    geometry = GEOMETRIES[model]
    for prof in geometry.profiles:
        parsed = parse_profile_name(prof.name)
        assert mig_memory_gb(DEVICE_MEMORY_BYTES[model], prof.memory_mib) == parsed.memory_gb, prof.name
        assert parsed.gpu_slices == prof.compute_slices
        assert prof.media_extensions == ("me" in parsed.attributes)


@pytest.mark.parametrize("model", sorted(GEOMETRIES))
def test_catalog_starts_fit_and_media_profiles_are_single(model: str) -> None:
    geometry = GEOMETRIES[model]
    for prof in geometry.profiles:
        assert all(s >= 0 and s + prof.memory_slices <= geometry.memory_slices for s in prof.starts)
        if prof.media_extensions:
            assert prof.max_count == 1


def test_geometry_rejects_bad_profiles() -> None:
    bad = MigProfile("3g.20gb", 3, 4, 1, 2, (0, 5), False, None, None)
    with pytest.raises(ValueError, match="do not fit"):
        MigGeometry("X", 8, 7, (bad,))
    good = MigProfile("1g.5gb", 1, 1, 1, 1, (0,), False, None, None)
    with pytest.raises(ValueError, match="duplicate"):
        MigGeometry("X", 8, 7, (good, good))


# ------------------------------------------------------------------------------------------
# Model lookup and profile lookup
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("A100-SXM4-40GB", "A100-SXM4-40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "A100-SXM4-40GB"),
        ("NVIDIA A100 80GB PCIe", "A100-SXM4-80GB"),
        ("NVIDIA-H100-80GB-HBM3", "H100-SXM5-80GB"),
        ("NVIDIA H100 NVL", "H100-NVL-94GB"),
        ("NVIDIA-H200", "H200"),
        ("nvidia a30", "A30"),
    ],
)
def test_geometry_for_aliases(text: str, key: str) -> None:
    assert geometry_for(text) is GEOMETRIES[key]


@pytest.mark.parametrize("text", ["Tesla-T4", "NVIDIA-L4", "", "A100"])
def test_geometry_for_unknown(text: str) -> None:
    assert geometry_for(text) is None


@pytest.mark.parametrize(
    "spelling", ["1g.10gb+me", "1g.10gb.me", "mig-1g.10gb.me", "nvidia.com/mig-1g.10gb.me", " 1g.10gb+me "]
)
def test_profile_lookup_accepts_spellings(spelling: str) -> None:
    prof = A100_80.profile(spelling)
    assert prof.name == "1g.10gb+me"
    assert A100_80.has_profile(spelling)


def test_profile_lookup_error_lists_valid_profiles() -> None:
    with pytest.raises(MigError) as info:
        A100_80.profile("1g.5gb")
    message = str(info.value)
    assert "A100-SXM4-80GB" in message and "1g.5gb" in message and "3g.40gb" in message
    assert not A100_80.has_profile("1g.5gb")
    assert not A100_80.has_profile("not a profile")


def test_profile_resource_name_and_label_key() -> None:
    prof = A100_80.profile("1g.10gb+me")
    assert prof.resource_name == "nvidia.com/mig-1g.10gb.me"
    assert prof.label_key == "mig-1g.10gb.me"
    assert A100_80.profile("3g.40gb").resource_name == "nvidia.com/mig-3g.40gb"


# ------------------------------------------------------------------------------------------
# Names and resources
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("3g.40gb", ParsedProfileName(None, 3, 40)),
        ("1c.3g.40gb", ParsedProfileName(1, 3, 40)),
        ("1g.10gb+me", ParsedProfileName(None, 1, 10, ("me",))),
        ("1g.10gb+me.all", ParsedProfileName(None, 1, 10, ("me.all",))),
        ("2g.20gb+gfx", ParsedProfileName(None, 2, 20, ("gfx",))),
        ("1g.10gb-me", ParsedProfileName(None, 1, 10, ("me",), negated=True)),
        ("7g.141gb", ParsedProfileName(None, 7, 141)),
    ],
)
def test_parse_profile_name(text: str, parsed: ParsedProfileName) -> None:
    assert parse_profile_name(text) == parsed
    assert format_profile_name(parsed) == text


def test_format_drops_redundant_compute_part() -> None:
    assert format_profile_name(parse_profile_name("3c.3g.40gb")) == "3g.40gb"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "3g",
        "3g.40",
        "3g.40gb+",
        "3g.40gb+ME",
        "3g.40gb+me,me",
        "4c.3g.40gb",
        "0g.5gb",
        "03g.40gb",
        "3g.40gb+me-gfx",
        "1g.10gb++me",
        "g.10gb",
        "1g.10gb.me",
        "1g.10GB",
    ],
)
def test_parse_profile_name_rejects_malformed(text: str) -> None:
    with pytest.raises(MigError):
        parse_profile_name(text)


_attr = st.from_regex(r"[a-z][a-z0-9]{0,3}(\.[a-z][a-z0-9]{0,3})?", fullmatch=True)


@st.composite
def parsed_names(draw: st.DrawFn) -> ParsedProfileName:
    g = draw(st.integers(1, 16))
    compute = draw(st.none() | st.integers(1, g - 1)) if g > 1 else None
    attrs = tuple(draw(st.lists(_attr, max_size=3, unique=True)))
    negated = draw(st.booleans()) if attrs else False
    return ParsedProfileName(compute, g, draw(st.integers(1, 2000)), attrs, negated)


@given(parsed_names())
def test_profile_name_round_trip(parsed: ParsedProfileName) -> None:
    text = format_profile_name(parsed)
    assert parse_profile_name(text) == parsed
    assert canonical_profile_name(text) == text
    resource = resource_name_for_profile(text)
    assert "+" not in resource
    assert profile_from_resource_name(resource) == text


def test_resource_name_conversions() -> None:
    assert resource_name_for_profile("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"
    assert resource_name_for_profile("3g.40gb") == "nvidia.com/mig-3g.40gb"
    assert resource_name_for_profile("mig-1g.10gb.me") == "nvidia.com/mig-1g.10gb.me"
    assert profile_from_resource_name("nvidia.com/mig-1g.10gb.me") == "1g.10gb+me"
    assert profile_from_resource_name("nvidia.com/mig-1g.10gb.me.all") == "1g.10gb+me.all"
    assert profile_from_resource_name("nvidia.com/mig-1c.3g.40gb") == "1c.3g.40gb"
    assert profile_from_resource_name("nvidia.com/mig-3g.40gb.shared") == "3g.40gb"
    assert profile_from_resource_name("nvidia.com/mig-1g.10gb.me.shared") == "1g.10gb+me"


@pytest.mark.parametrize(
    "resource",
    [
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-",
        "nvidia.com/mig-bogus",
        "example.com/mig-1g.10gb",
        "mig-1g.10gb",
        "cpu",
    ],
)
def test_profile_from_resource_name_rejects_non_mig(resource: str) -> None:
    assert profile_from_resource_name(resource) is None


def test_resource_name_for_malformed_profile_raises() -> None:
    with pytest.raises(MigError):
        resource_name_for_profile("big")


def test_mig_memory_gb_naming_formula() -> None:
    # A100-80GB full instance: 80384/81920 rounds up to 8/8 of 80 GiB.
    assert mig_memory_gb(80 * GIB, 80384) == 80
    assert mig_memory_gb(40 * GIB, 4864) == 5
    # 4/8 of 141 GiB is 70.5: Go rounds half away from zero (Python's round() would give 70).
    assert mig_memory_gb(143771 * MIB, 71680) == 71
    # Just over a quarter of memory already rounds up to 3/8.
    assert mig_memory_gb(80 * GIB, 20481) == 30
    assert mig_memory_gb(80 * GIB, 20480) == 20
    with pytest.raises(ValueError):
        mig_memory_gb(0, 10)
    with pytest.raises(ValueError):
        mig_memory_gb(GIB, -1)


# ------------------------------------------------------------------------------------------
# Placements and validation
# ------------------------------------------------------------------------------------------


def test_placement_str_order_and_parse() -> None:
    assert str(MigPlacement("3g.40gb", 4)) == "3g.40gb@4"
    assert P(" 3g.40gb @ 4 ") == MigPlacement("3g.40gb", 4)
    assert sorted([P("3g.40gb@4"), P("1g.10gb@6"), P("3g.40gb@0")])[0] == P("1g.10gb@6")
    for bad in ["3g.40gb", "3g.40gb@", "@4", "3g.40gb@-1", "3g.40gb@x"]:
        with pytest.raises(MigError):
            parse_placement(bad)


def test_valid_layouts_have_no_problems() -> None:
    assert validate_layout(A100_80, []) == []
    assert validate_layout(A100_80, [P("4g.40gb@0"), P("3g.40gb@4")]) == []
    assert validate_layout(A100_80, [P("1g.10gb.me@6"), P("2g.20gb@0"), P("1g.10gb@2")]) == []
    check_layout(A100_80, [P("7g.80gb@0")])


def test_overlap_names_both_instances() -> None:
    problems = validate_layout(A100_80, [P("3g.40gb@0"), P("2g.20gb@2")])
    assert len(problems) == 1
    assert "3g.40gb@0" in problems[0] and "2g.20gb@2" in problems[0] and "overlaps" in problems[0]


def test_overlap_on_slice_seven() -> None:
    problems = validate_layout(A100_80, [P("3g.40gb@4"), P("1g.20gb@6")])
    assert any("overlaps" in p for p in problems)
    assert validate_layout(A100_80, [P("3g.40gb@0"), P("1g.20gb@6")]) == []


def test_invalid_start_lists_valid_starts() -> None:
    problems = validate_layout(A100_80, [P("2g.20gb@1")])
    assert len(problems) == 1
    assert "2g.20gb@1" in problems[0] and "0, 2 or 4" in problems[0]
    # 1g.10gb may not use memory slice 7 on its own.
    assert validate_layout(A100_80, [P("1g.10gb@7")]) != []


def test_unknown_profile_is_reported_with_valid_ones() -> None:
    problems = validate_layout(A30, [P("3g.20gb@0")])
    assert len(problems) == 1
    assert "3g.20gb" in problems[0] and "4g.24gb" in problems[0] and "A30" in problems[0]


def test_max_count_exceeded() -> None:
    layout = [P(f"1g.20gb@{s}") for s in (0, 2, 4, 6)]
    assert validate_layout(A100_80, layout) == []
    # Five instances can only be laid out with an overlap, but the limit is reported on its own.
    problems = validate_layout(A100_80, [*layout, P("1g.20gb@0")])
    assert any("at most 4 instances of 1g.20gb" in p for p in problems)


def test_media_extension_instances_are_limited_to_one() -> None:
    problems = validate_layout(H100, [P("1g.10gb+me@0"), P("1g.10gb+me@1")])
    assert problems == ["H100-SXM5-80GB allows at most 1 instance of 1g.10gb+me but the layout has 2; remove 1."]
    # On A30 the two +me profiles each allow one instance, but they compete for the same engines.
    problems = validate_layout(A30, [P("1g.6gb+me@0"), P("2g.12gb+me@2")])
    assert len(problems) == 1 and "media-extension" in problems[0]
    assert validate_layout(A30, [P("1g.6gb+me@0"), P("1g.6gb@1"), P("2g.12gb@2")]) == []


def test_compute_slice_total() -> None:
    problems = validate_layout(A100_80, [P("7g.80gb@0"), P("1g.10gb@0")])
    assert any("8 compute slices" in p and "only 7" in p for p in problems)


def test_check_layout_collects_every_problem() -> None:
    with pytest.raises(MigError) as info:
        check_layout(A100_80, [P("3g.40gb@0"), P("2g.20gb@2"), P("4g.40gb@4")])
    err = info.value
    assert err.model == "A100-SXM4-80GB"
    assert len(err.problems) == 3  # an overlap, a bad start, 9 of 7 compute slices
    assert all(p in str(err) for p in err.problems)


# ------------------------------------------------------------------------------------------
# Enumeration
# ------------------------------------------------------------------------------------------


def test_a100_base_profiles_have_19_layouts_and_14_mixes() -> None:
    layouts = enumerate_maximal_layouts(A100_40, A100_BASE)
    assert len(layouts) == 19
    expected = [
        {"7g.40gb": 1},
        {"4g.20gb": 1, "3g.20gb": 1},
        {"4g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1},
        {"4g.20gb": 1, "1g.5gb": 3},
        {"3g.20gb": 2},
        {"3g.20gb": 1, "2g.10gb": 2},
        {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2},
        {"3g.20gb": 1, "1g.5gb": 4},
        {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1},
        {"3g.20gb": 1, "1g.5gb": 3},
        {"2g.10gb": 3, "1g.5gb": 1},
        {"2g.10gb": 2, "1g.5gb": 3},
        {"2g.10gb": 1, "1g.5gb": 5},
        {"1g.5gb": 7},
    ]
    assert mixes(layouts) == {frozenset(m.items()) for m in expected}


def test_a100_with_double_memory_1g_has_78_layouts_and_38_mixes() -> None:
    layouts = enumerate_maximal_layouts(A100_40, [*A100_BASE, "1g.10gb"])
    assert len(layouts) == 78
    assert len(mixes(layouts)) == 38
    # The default profile set is every profile without media extensions: the same 78.
    assert enumerate_maximal_layouts(A100_40) == layouts


def test_a30_default_layouts() -> None:
    layouts = enumerate_maximal_layouts(A30)
    assert len(layouts) == 5
    assert mixes(layouts) == {
        frozenset({("4g.24gb", 1)}),
        frozenset({("2g.12gb", 2)}),
        frozenset({("2g.12gb", 1), ("1g.6gb", 2)}),
        frozenset({("1g.6gb", 4)}),
    }
    assert all(not A30.profile(p.profile).media_extensions for lay in layouts for p in lay)


def test_enumeration_output_is_sorted_and_canonical() -> None:
    layouts = enumerate_maximal_layouts(A100_80, ["3g.40gb", "2g.20gb", "1g.10gb.me", "1g.10gb"])
    for layout in layouts:
        assert list(layout) == sorted(layout, key=lambda p: p.start)
    keys = [[(p.start, p.profile) for p in layout] for layout in layouts]
    assert keys == sorted(keys)
    # A single +me instance at most, despite +me being allowed.
    assert all(sum(p.profile == "1g.10gb+me" for p in lay) <= 1 for lay in layouts)
    assert any(p.profile == "1g.10gb+me" for lay in layouts for p in lay)


def test_enumeration_rejects_unknown_profile() -> None:
    with pytest.raises(MigError):
        enumerate_maximal_layouts(A30, ["3g.20gb"])


def _is_maximal(geometry: MigGeometry, layout: tuple[MigPlacement, ...], allowed: list[str]) -> bool:
    return all(
        validate_layout(geometry, [*layout, MigPlacement(name, s)]) != []
        for name in allowed
        for s in geometry.profile(name).starts
    )


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_enumerated_layouts_are_valid_and_maximal(data: st.DataObject) -> None:
    geometry = data.draw(st.sampled_from(list(GEOMETRIES.values())))
    allowed = data.draw(st.lists(st.sampled_from(geometry.profile_names), min_size=1, unique=True))
    layouts = enumerate_maximal_layouts(geometry, allowed)
    assert layouts, "the empty GPU always admits at least one allowed instance"
    assert len(set(layouts)) == len(layouts)
    for layout in layouts:
        assert validate_layout(geometry, layout) == []
        assert {p.profile for p in layout} <= set(allowed)
        assert _is_maximal(geometry, layout, allowed)
        assert free_starts(geometry, layout, allowed[0]) == []


def _all_valid_layouts(geometry: MigGeometry, allowed: list[str]) -> set[tuple[MigPlacement, ...]]:
    """Every valid layout, judged by validate_layout alone.

    Subsets are grown one candidate at a time; a subset with overlapping memory is not grown
    further, which loses nothing since every superset of it overlaps too.
    """
    candidates = [MigPlacement(n, s) for n in allowed for s in geometry.profile(n).starts]
    found: set[tuple[MigPlacement, ...]] = set()

    def grow(chosen: list[MigPlacement], index: int) -> None:
        if not validate_layout(geometry, chosen):
            found.add(tuple(sorted(chosen, key=lambda p: p.start)))
        for i in range(index, len(candidates)):
            extended = [*chosen, candidates[i]]
            if not overlaps(geometry, extended):
                grow(extended, i + 1)

    grow([], 0)
    return found


def test_enumeration_matches_brute_force_on_a30() -> None:
    allowed = list(A30.profile_names)
    brute = {lay for lay in _all_valid_layouts(A30, allowed) if _is_maximal(A30, lay, allowed)}
    assert set(enumerate_maximal_layouts(A30, allowed)) == brute


@settings(max_examples=300)
@given(
    geometry=st.sampled_from(list(GEOMETRIES.values())),
    raw=st.lists(st.tuples(st.integers(0, 6), st.integers(-1, 8)), max_size=8),
)
def test_accepted_random_layouts_never_overlap(geometry: MigGeometry, raw: list[tuple[int, int]]) -> None:
    names = geometry.profile_names
    layout = [MigPlacement(names[i % len(names)], start) for i, start in raw]
    if validate_layout(geometry, layout) == []:
        assert not overlaps(geometry, layout)
        for placement in layout:
            assert placement.start in geometry.profile(placement.profile).starts
        for name, count in layout_mix(layout).items():
            assert count <= geometry.profile(name).max_count
        assert sum(geometry.profile(p.profile).compute_slices for p in layout) <= geometry.compute_slices


# ------------------------------------------------------------------------------------------
# Packing, parsing layouts, free starts
# ------------------------------------------------------------------------------------------


def test_layout_mix_counts() -> None:
    assert layout_mix([P("1g.10gb@0"), P("3g.40gb@4"), P("1g.10gb@1")]) == {"1g.10gb": 2, "3g.40gb": 1}
    assert layout_mix([]) == {}


def test_pack_two_3g_and_not_two_4g() -> None:
    assert pack_profiles(A100_80, {"3g.40gb": 2}) == (P("3g.40gb@0"), P("3g.40gb@4"))
    assert pack_profiles(A100_80, {"4g.40gb": 2}) is None
    assert pack_profiles(A100_80, {}) == ()
    assert pack_profiles(A100_80, {"3g.40gb": 0}) == ()


@pytest.mark.parametrize(
    ("geometry", "counts"),
    [
        (A100_40, {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),
        (A100_80, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
        (A30, {"1g.6gb": 2, "2g.12gb": 1}),
        (H100_NVL, {"1g.12gb": 2, "2g.24gb": 1, "3g.47gb": 1}),
        (H200, {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}),
    ],
)
def test_all_balanced_configs_pack(geometry: MigGeometry, counts: dict[str, int]) -> None:
    packed = pack_profiles(geometry, counts)
    assert packed is not None
    assert validate_layout(geometry, packed) == []
    assert layout_mix(packed) == dict(sorted(counts.items()))


def test_pack_needs_backtracking() -> None:
    # Putting 3g at 0 first leaves 4-7 for 2g+1g+1g, where only one 1g fits next to 2g@4.
    packed = pack_profiles(A100_80, {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2})
    assert packed is not None and validate_layout(A100_80, packed) == []
    assert P("3g.40gb@4") in packed


def test_pack_respects_limits() -> None:
    assert pack_profiles(A100_80, {"1g.10gb": 8}) is None
    assert pack_profiles(A100_80, {"1g.10gb+me": 2}) is None
    assert pack_profiles(A30, {"1g.6gb+me": 1, "2g.12gb+me": 1}) is None
    assert pack_profiles(A100_80, {"7g.80gb": 1, "1g.10gb": 1}) is None
    # Different spellings of one profile add up.
    assert pack_profiles(A100_80, {"1g.10gb+me": 1, "1g.10gb.me": 1}) is None


def test_pack_rejects_mistakes() -> None:
    with pytest.raises(MigError):
        pack_profiles(A100_80, {"1g.5gb": 1})
    with pytest.raises(MigError):
        pack_profiles(A100_80, {"1g.10gb": -1})


@pytest.mark.slow
@pytest.mark.parametrize("model", ["A100-SXM4-40GB", "A30"])
def test_pack_finds_every_valid_mix(model: str) -> None:
    geometry = GEOMETRIES[model]
    valid = _all_valid_layouts(geometry, list(geometry.profile_names))
    valid_mixes = {frozenset(layout_mix(lay).items()) for lay in valid}
    for mix in valid_mixes:
        packed = pack_profiles(geometry, dict(mix))
        assert packed is not None, mix
        assert validate_layout(geometry, packed) == []
        assert frozenset(layout_mix(packed).items()) == mix
    # And a mix that no valid layout has is refused.
    assert frozenset({("3g.20gb", 2), ("1g.5gb", 1)}) not in valid_mixes
    if model == "A100-SXM4-40GB":
        assert pack_profiles(geometry, {"3g.20gb": 2, "1g.5gb": 1}) is None


def test_parse_layout_explicit() -> None:
    layout = parse_layout("3g.40gb@4, 3g.40gb@0", A100_80)
    assert layout == (P("3g.40gb@0"), P("3g.40gb@4"))
    assert parse_layout("1g.10gb.me@6", A100_80) == (P("1g.10gb+me@6"),)
    with pytest.raises(MigError, match="overlaps"):
        parse_layout("3g.40gb@0,2g.20gb@2", A100_80)


def test_parse_layout_counts() -> None:
    assert parse_layout("3g.40gb:2", A100_80) == (P("3g.40gb@0"), P("3g.40gb@4"))
    assert parse_layout("3g.40gb,3g.40gb", A100_80) == (P("3g.40gb@0"), P("3g.40gb@4"))
    layout = parse_layout("3g.40gb:1,1g.10gb:2, 2g.20gb", A100_80)
    assert layout_mix(layout) == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    assert parse_layout("nvidia.com/mig-1g.10gb.me", A100_80) == (P("1g.10gb+me@0"),)
    assert parse_layout("  ", A100_80) == ()


@pytest.mark.parametrize(
    "text", ["4g.40gb:2", "3g.40gb@0,2g.20gb", "3g.40gb:x", "3g.40gb:-1", "3g.40gb,,", "5g.50gb:1", "3g.40gb@9"]
)
def test_parse_layout_errors(text: str) -> None:
    with pytest.raises(MigError) as info:
        parse_layout(text, A100_80)
    assert "A100-SXM4-80GB" in str(info.value) or "placement" in str(info.value)


def test_free_starts() -> None:
    assert free_starts(A100_80, [], "1g.10gb") == [0, 1, 2, 3, 4, 5, 6]
    layout = [P("3g.40gb@0")]
    assert free_starts(A100_80, layout, "2g.20gb") == [4]
    assert free_starts(A100_80, layout, "1g.20gb") == [4, 6]
    assert free_starts(A100_80, layout, "3g.40gb") == [4]
    assert free_starts(A100_80, layout, "4g.40gb") == []
    # Instance limit, not space, blocks a second +me.
    assert free_starts(A100_80, [P("1g.10gb+me@0")], "1g.10gb.me") == []
    assert free_starts(A30, [P("1g.6gb+me@0")], "2g.12gb+me") == []
    assert free_starts(A30, [P("1g.6gb+me@0")], "2g.12gb") == [2]
    # Problems already in the layout (an overlap at 0-3) do not hide space elsewhere.
    assert free_starts(A100_80, [P("3g.40gb@0"), P("2g.20gb@2")], "1g.10gb") == [4, 5, 6]
    with pytest.raises(MigError):
        free_starts(A100_80, [], "1g.5gb")
