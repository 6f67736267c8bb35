"""The node agent's device-plugin configuration (``--config``): NVIDIA's file, read by
:mod:`gpufleet.api.device_plugin_config`, which `gpufleet plan` also uses for the device plugin's ConfigMaps of a
GPU Operator cluster. Re-exported here under the names the node agent has always imported."""

from gpufleet.api.device_plugin_config import (
    DEFAULT_MACHINE_TYPE_FILE,
    KIND,
    LIST_STRATEGIES,
    AgentDeviceConfig,
    DeviceListStrategy,
    DpConfigError,
    PluginOptions,
    config_from_text,
    load_device_config,
)

__all__ = [
    "DEFAULT_MACHINE_TYPE_FILE",
    "KIND",
    "LIST_STRATEGIES",
    "AgentDeviceConfig",
    "DeviceListStrategy",
    "DpConfigError",
    "PluginOptions",
    "config_from_text",
    "load_device_config",
]
