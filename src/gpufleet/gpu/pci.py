"""PCI device IDs of the catalog's MIG-capable models, as NVIDIA's mig-parted filters GPUs by them.

A mig-parted configuration entry may carry ``device-filter: ["0x20B010DE", ...]``: it then applies only to
GPUs with one of those PCI device IDs (device ID then vendor ID ``10DE``, as NVML reports ``pciDeviceId``).
Nodes do not publish the ID, but GPU Feature Discovery publishes the product, which the catalog maps to a
model; this table maps each model to the IDs of its variants (SXM and PCIe boards, and NVIDIA's export
variants of the same silicon, which take the same MIG profiles). Sources: mig-parted's default configuration
(``deployments/systemd/config-default.yaml``, which groups the IDs by MIG profile family) and the reference
notes (shared/reference/nvidia-gpu-stack.md §1.6).
"""

from __future__ import annotations

PCI_DEVICE_IDS: dict[str, frozenset[str]] = {
    "A30": frozenset({"0x20B710DE"}),
    # A100-40GB SXM4 and PCIe, A800-40GB
    "A100-SXM4-40GB": frozenset({"0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"}),
    # A100-80GB SXM4 and PCIe, A800-80GB
    "A100-SXM4-80GB": frozenset({"0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE"}),
    # H100-80GB SXM5 and PCIe, H800-80GB
    "H100-SXM5-80GB": frozenset({"0x233010DE", "0x233110DE", "0x232210DE", "0x232410DE"}),
    # H100 NVL, H800 NVL
    "H100-NVL-94GB": frozenset({"0x232110DE", "0x233A10DE"}),
    # H200 141GB and H200 NVL
    "H200": frozenset({"0x233510DE", "0x233B10DE"}),
}


def normalise_device_id(text: str) -> str:
    """``0x20b010de`` -> ``0x20B010DE``; a 4-digit device ID gets NVIDIA's vendor ID appended."""
    value = text.strip()
    digits = value[2:] if value.lower().startswith("0x") else value
    digits = digits.upper()
    if len(digits) == 4:
        digits += "10DE"
    return "0x" + digits


def matches(model_key: str, device_filter: tuple[str, ...]) -> bool | None:
    """Whether a mig-parted entry with ``device_filter`` applies to GPUs of ``model_key``: True or False, or None
    when the filter is not empty and the model's PCI IDs are not known here (the answer is then unknown)."""
    if not device_filter:
        return True
    ids = PCI_DEVICE_IDS.get(model_key)
    if ids is None:
        return None
    return any(normalise_device_id(d) in ids for d in device_filter)
