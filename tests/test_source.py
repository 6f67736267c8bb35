from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
import yaml

from gpufleet.api.errors import ManifestError, ManifestErrors, Problems
from gpufleet.api.source import Document, load_paths, load_text

THREE = """\
# three objects
apiVersion: v1
kind: Namespace
metadata:
  name: team-a
---
apiVersion: v1
kind: Pod
metadata:
  name: train
  namespace: team-a
spec:
  containers:
  - name: main
    image: pytorch
    resources:
      limits:
        nvidia.com/gpu: 1
  - name: side
    image: busybox
---

apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data:
  key: |
    line one
    line two
  other: x
"""


def load(text: str, file: str = "m.yaml") -> tuple[list[Document], Problems]:
    problems = Problems()
    return load_text(text, file, problems), problems


def test_three_documents_keep_field_lines() -> None:
    docs, problems = load(THREE)
    assert not problems.all
    assert [(d.data["kind"], d.line, d.index, d.file) for d in docs] == [
        ("Namespace", 2, 0, "m.yaml"),
        ("Pod", 7, 1, "m.yaml"),
        ("ConfigMap", 23, 2, "m.yaml"),
    ]
    ns, pod, cm = docs
    assert ns.line_of("metadata", "name") == 5
    assert pod.line_of("spec") == 12
    assert pod.line_of("spec", "containers", 0) == 14
    assert pod.line_of("spec", "containers", 1) == 19
    assert pod.line_of("spec", "containers", -1, "image") == 20
    assert pod.line_of("spec", "containers", 0, "resources") == 16
    assert pod.line_of("spec", "containers", 0, "resources", "limits", "nvidia.com/gpu") == 18
    assert cm.line_of("metadata", "name") == 25
    assert cm.line_of("data", "other") == 30
    assert cm.data["data"]["key"] == "line one\nline two\n"


def test_line_of_stops_at_the_deepest_existing_node() -> None:
    _, pod, _ = load(THREE)[0]
    assert pod.line_of() == 7
    assert pod.line_of("status") == 7
    assert pod.line_of("spec", "containers", 0, "nope", "deeper") == 14
    assert pod.line_of("spec", "containers", 7) == 13
    assert pod.line_of("spec", "containers", 0, "image", "deeper") == 15  # a scalar has no children
    assert pod.line_of("metadata", 0) == 9
    assert Document({"a": 1}, "x", 4, 0).line_of("a") == 4  # built by hand: no line index


def test_data_matches_safe_load() -> None:
    text = """\
base: &b {cpu: 1, mem: 2}
x:
  <<: *b
  cpu: 3
y: {<<: [*b, {z: 1}], mem: 5}
list: &l [1, 2]
again: *l
types: [1e3, 1.5e3, 0x10, 1_000, ~, true, yes, "1", 2020-01-01, .inf, !!str 5]
on: off
---
- just
- a list
"""
    docs, _ = load(text)
    # The list document is not a manifest and is reported, so compare the first one only.
    assert docs[0].data == next(yaml.safe_load_all(text))
    assert docs[0].data["again"] is docs[0].data["list"]  # aliases share the object, as in safe_load
    assert docs[0].line_of("x", "cpu") == 4
    assert docs[0].line_of("x", "mem") == 1  # merged keys point at the anchor
    assert docs[0].line_of(True) == 9  # "on" is the boolean key True in YAML 1.1
    assert docs[0].line_of(1) == 1  # ...but a list index does not select it


def test_stream_and_file_locations_with_crlf_and_bom() -> None:
    docs, problems = load("\ufeffa: 1\r\n---\r\nb:\r\n  c: 2\r\n")
    assert not problems
    assert [d.data for d in docs] == [{"a": 1}, {"b": {"c": 2}}]
    assert docs[1].line_of("b", "c") == 4


def test_broken_document_between_two_good_ones() -> None:
    text = """\
apiVersion: v1
kind: Pod
metadata: {name: first}
---
apiVersion: v1
kind: Pod
metadata:
  name: broken
   labels: {a: b}
---
apiVersion: v1
kind: Pod
metadata:
  name: last
"""
    docs, problems = load(text)
    assert [d.data["metadata"]["name"] for d in docs] == ["first", "last"]
    assert [d.index for d in docs] == [0, 2]
    assert docs[1].line == 11
    assert docs[1].line_of("metadata", "name") == 14
    (error,) = problems.errors
    assert error.file == "m.yaml"
    assert error.line == 9
    assert error.message.startswith("invalid YAML:")
    assert error.fix


def test_broken_flow_collection_does_not_swallow_later_documents() -> None:
    docs, problems = load("a: 1\n---\nb: [1, 2\n---\nc: 3\n---\n---\nd: 4\n")
    assert [(d.data, d.index, d.line) for d in docs] == [({"a": 1}, 0, 1), ({"c": 3}, 2, 5), ({"d": 4}, 4, 8)]
    assert len(problems.errors) == 1
    assert problems.errors[0].line is not None and 3 <= problems.errors[0].line <= 4


def test_empty_and_non_mapping_documents() -> None:
    docs, problems = load("---\n# only a comment\n---\nnull\n---\n- a\n- b\n---\nhello\n---\nkind: Pod\n")
    assert [(d.data, d.index) for d in docs] == [({"kind": "Pod"}, 4)]
    messages = [(e.line, e.message) for e in problems.errors]
    assert messages == [
        (6, "a manifest document must be a mapping with apiVersion and kind, got a list"),
        (9, "a manifest document must be a mapping with apiVersion and kind, got the string 'hello'"),
    ]


def test_kind_list_is_expanded_with_item_lines() -> None:
    text = """\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata:
    name: a
- 42
- apiVersion: v1
  kind: Service
  metadata: {name: b, namespace: ns}
"""
    docs, problems = load(text)
    assert [(d.data["kind"], d.line, d.index) for d in docs] == [("Pod", 4, 0), ("Service", 9, 0)]
    assert docs[0].line_of("metadata", "name") == 7
    assert docs[1].line_of("metadata") == 11
    (error,) = problems.errors
    assert (error.line, error.field, error.kind) == (8, "items[1]", "List")
    assert "the number 42" in error.message


def test_duplicate_keys_refuse_the_document_as_the_api_server_does() -> None:
    # kubectl's default (--validate=strict) fails on duplicate fields: keeping the last value would silently
    # lose the first (a GPU limit, say). The documents around it are still read.
    text = ("kind: Pod\nmetadata:\n  name: a\n  namespace: ns\nspec:\n  x: 1\n  x: 2\n---\n"
            "kind: Pod\nmetadata: {name: b}\n")
    docs, problems = load(text)
    assert [d.data["metadata"]["name"] for d in docs] == ["b"]
    (error,) = problems.errors
    assert (error.line, error.field, error.kind, error.name) == (7, "spec.x", "Pod", "ns/a")
    assert str(error).startswith("m.yaml:7: Pod ns/a: spec.x: duplicate key 'x'")


def test_merge_override_is_not_a_duplicate() -> None:
    _, problems = load("a: &a {x: 1}\nb:\n  <<: *a\n  x: 2\n")
    assert not problems.all


def test_bad_content_is_reported_with_line() -> None:
    _, problems = load("kind: Pod\nspec: !Ref other\n---\nkind: Pod\nx: !!int nope\n---\na: &r [*r]\n")
    assert [e.line for e in problems.errors] == [2, 5, 7]
    assert "!Ref" in problems.errors[0].message
    assert "recursive alias" in problems.errors[2].message


def write(path: Path, text: str = "kind: Pod\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_folder_loading_order(tmp_path: Path) -> None:
    root = tmp_path / "manifests"
    for rel in ["z.yaml", "a.yml", "b.json", "b/c.yaml", "b/a/d.YAML", ".hidden.yaml", ".git/x.yaml", "n.txt"]:
        write(root / rel, f"kind: Pod\nmetadata: {{name: {rel}}}\n")
    problems = Problems()
    docs = load_paths([str(root)], problems)
    assert not problems.all
    rel_files = [os.path.relpath(d.file, root) for d in docs]
    assert rel_files == ["a.yml", os.path.join("b", "a", "d.YAML"), os.path.join("b", "c.yaml"), "b.json", "z.yaml"]
    assert all(d.file.startswith(str(root)) for d in docs)


def test_paths_in_order_with_stdin(tmp_path: Path) -> None:
    write(tmp_path / "one.yaml", "kind: A\n")
    write(tmp_path / "two.txt", "kind: B\n")  # named explicitly, so the suffix does not matter
    problems = Problems()
    stdin = io.StringIO("kind: C\n---\nkind: D\n")
    docs = load_paths([str(tmp_path / "one.yaml"), "-", str(tmp_path / "two.txt")], problems, stdin=stdin)
    assert [(d.data["kind"], d.file) for d in docs] == [
        ("A", str(tmp_path / "one.yaml")),
        ("C", "<stdin>"),
        ("D", "<stdin>"),
        ("B", str(tmp_path / "two.txt")),
    ]
    assert docs[2].line == 3


def test_missing_path_is_an_error_and_others_still_load(tmp_path: Path) -> None:
    write(tmp_path / "ok.yaml")
    problems = Problems()
    missing = str(tmp_path / "nope.yaml")
    docs = load_paths([missing, str(tmp_path / "ok.yaml")], problems)
    assert len(docs) == 1
    (error,) = problems.errors
    assert error.file == missing
    assert str(error) == f"{missing}: no such file or folder; fix: check the path (use - to read from stdin)"


def test_unreadable_files(tmp_path: Path) -> None:
    (tmp_path / "latin1.yaml").write_bytes(b"kind: Caf\xe9\n")
    (tmp_path / "empty").mkdir()
    problems = Problems()
    assert load_paths([str(tmp_path / "latin1.yaml"), str(tmp_path / "empty")], problems) == []
    assert "not UTF-8" in problems.errors[0].message
    assert "no .yaml" in problems.warnings[0].message


def test_manifest_error_text_and_dict() -> None:
    e = ManifestError(
        'extended resources are whole numbers, got "0.5"',
        file="examples/x.yaml",
        line=12,
        kind="Pod",
        name="default/train",
        field="spec.containers[0].resources.limits.nvidia.com/gpu",
        fix='write the fraction as the annotation gpufleet.io/gpu-fraction: "0.5"',
    )
    assert str(e) == (
        "examples/x.yaml:12: Pod default/train: spec.containers[0].resources.limits.nvidia.com/gpu: "
        'extended resources are whole numbers, got "0.5"; '
        'fix: write the fraction as the annotation gpufleet.io/gpu-fraction: "0.5"'
    )
    assert str(ManifestError("bad", line=3)) == "line 3: bad"
    assert str(ManifestError("bad", file="f", name="n", severity="warning")) == "warning: f: n: bad"
    assert e.to_dict()["line"] == 12
    assert set(ManifestError("m").to_dict()) == {"severity", "message", "file", "line", "kind", "name", "field", "fix"}


def test_problems_collects_and_raises() -> None:
    problems = Problems()
    problems.warning("w", file="f")
    assert not problems
    problems.raise_if_errors()
    problems.error("e1", line=1)
    problems.add(ManifestError("e2"))
    problems.extend([ManifestError("w2", severity="warning")])
    assert problems
    assert [e.message for e in problems.errors] == ["e1", "e2"]
    assert [e.message for e in problems.warnings] == ["w", "w2"]
    assert [e.message for e in problems.all] == ["w", "e1", "e2", "w2"]
    with pytest.raises(ManifestErrors) as info:
        problems.raise_if_errors()
    assert [e.message for e in info.value.errors] == ["e1", "e2"]
    assert "2 manifest problems" in str(info.value)


@pytest.mark.slow
def test_many_documents_load_linearly() -> None:
    doc = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c{i}\ndata:\n  a: '1'\n"
    text = "---\n".join(doc.format(i=i) for i in range(5000))
    broken = text.replace("name: c2500\n", "name: c2500\n bad: [\n")
    docs, problems = load(broken)
    assert len(docs) == 4999
    assert docs[-1].line_of("data", "a") == 5000 * 7  # one line more than the 7 per document
    assert [e.line for e in problems.errors] == [2500 * 7 + 5]
