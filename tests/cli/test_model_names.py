"""One rule for a GPU model's name (the catalog's :meth:`Catalog.lookup`), the same in ``gpufleet mig`` and in a
NodePool: a key, product name or declared alias names its model; any other name several models share is an error
listing them, never silently one of them."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.gpu.catalog import DEFAULT_CATALOG, AmbiguousModelError

runner = CliRunner()


@pytest.mark.parametrize(("name", "key"), [("h100", "H100-SXM5-80GB"), ("H100", "H100-SXM5-80GB"),
                                           ("v100", "V100-16GB"), ("A100-80GB", "A100-SXM4-80GB"),
                                           ("NVIDIA-A100-SXM4-40GB", "A100-SXM4-40GB")])
def test_names_and_declared_aliases_resolve(name: str, key: str) -> None:
    assert DEFAULT_CATALOG.resolve(name).key == key


@pytest.mark.parametrize(("name", "choices"), [("A100", ("A100-SXM4-40GB", "A100-SXM4-80GB")),
                                               ("V100-SXM2", ("V100-16GB", "V100-32GB"))])
def test_a_shared_name_is_an_error_listing_the_choices(name: str, choices: tuple[str, ...]) -> None:
    for memory in (None, 81920):  # a memory given does not make it an ad-hoc model either
        with pytest.raises(AmbiguousModelError) as caught:
            DEFAULT_CATALOG.resolve(name, memory)
        assert caught.value.choices == choices
        assert all(c in str(caught.value) for c in choices)


@pytest.mark.parametrize("name", ["H100", "h100"])
def test_mig_takes_a_declared_alias(name: str) -> None:
    result = runner.invoke(app, ["mig", "layouts", name])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("H100-SXM5-80GB")


@pytest.mark.parametrize("gpu", ["{model: A100, count: 2}", "{model: A100, count: 2, memory: 80Gi}"])
def test_a_node_pool_with_a_shared_name_is_invalid_with_file_line_and_choices(tmp_path: Path, gpu: str) -> None:
    path = tmp_path / "pool.yaml"
    path.write_text("apiVersion: gpufleet.io/v1alpha1\nkind: NodePool\nmetadata: {name: gpu}\nspec:\n  count: 1\n"
                    f"  cpu: \"8\"\n  memory: 32Gi\n  gpu: {gpu}\n")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code != 0, result.output
    line = next(x for x in result.output.splitlines() if "spec.gpu.model" in x)
    assert f"{path}:8:" in line and "A100-SXM4-40GB" in line and "A100-SXM4-80GB" in line, result.output
    assert "unknown GPU model" not in result.output


def test_a_node_pool_with_a_declared_alias_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "pool.yaml"
    path.write_text("apiVersion: gpufleet.io/v1alpha1\nkind: NodePool\nmetadata: {name: gpu}\nspec:\n  count: 1\n"
                    "  cpu: \"8\"\n  memory: 32Gi\n  gpu: {model: h100, count: 2}\n")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
