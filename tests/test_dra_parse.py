"""DRA objects (resource.k8s.io v1, v1beta2, v1beta1) read into typed objects, and pods' claims read onto the pods:
each kind in each version, errors that name the field and the line, unknown and unsupported fields said as left
out (--strict refuses them), and the one warning every pod with claims gets until they are allocated."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.api.dra_objects import DeviceAttribute, DeviceSelection
from gpufleet.api.errors import LEFT_OUT, ManifestError
from gpufleet.api.manifests import Manifests
from gpufleet.api.objects import ContainerClaim, PodResourceClaim
from gpufleet.cli.main import app
from tests.conftest import manifests

runner = CliRunner()

SLICE_V1 = """\
apiVersion: resource.k8s.io/{version}
kind: ResourceSlice
metadata: {{name: node-a-gpu}}
spec:
  driver: gpu.nvidia.com
  nodeName: node-a
  pool: {{name: node-a, generation: 2, resourceSliceCount: 1}}
  sharedCounters:
  - name: gpu-0-counter-set
    counters:
      memory: {{value: 80Gi}}
  devices:
  - name: gpu-0
    attributes:
      type: {{string: gpu}}
      productName: {{string: NVIDIA H100 80GB HBM3}}
      cudaComputeCapability: {{version: 9.0.0}}
      resource.kubernetes.io/pcieRoot: {{string: pci0000:15}}
      index: {{int: 0}}
      coherent: {{bool: false}}
    capacity:
      memory: {{value: 80Gi}}
    consumesCounters:
    - counterSet: gpu-0-counter-set
      counters:
        memory: {{value: 80Gi}}
"""

# The same slice as v1beta1 writes it: a device's fields under basic.
SLICE_BETA1 = """\
apiVersion: resource.k8s.io/v1beta1
kind: ResourceSlice
metadata: {name: node-a-gpu}
spec:
  driver: gpu.nvidia.com
  nodeName: node-a
  pool: {name: node-a, generation: 2, resourceSliceCount: 1}
  sharedCounters:
  - name: gpu-0-counter-set
    counters:
      memory: {value: 80Gi}
  devices:
  - name: gpu-0
    basic:
      attributes:
        type: {string: gpu}
        productName: {string: NVIDIA H100 80GB HBM3}
        cudaComputeCapability: {version: 9.0.0}
        resource.kubernetes.io/pcieRoot: {string: pci0000:15}
        index: {int: 0}
        coherent: {bool: false}
      capacity:
        memory: {value: 80Gi}
      consumesCounters:
      - counterSet: gpu-0-counter-set
        counters:
          memory: {value: 80Gi}
"""

CLASS = """\
apiVersion: resource.k8s.io/{version}
kind: DeviceClass
metadata: {{name: gpu.nvidia.com}}
spec:
  selectors:
  - cel: {{expression: "device.driver == 'gpu.nvidia.com'"}}
  config:
  - opaque:
      driver: gpu.nvidia.com
      parameters: {{apiVersion: resource.nvidia.com/v1beta1, kind: GpuConfig}}
"""

CLAIM_V1 = """\
apiVersion: resource.k8s.io/{version}
kind: ResourceClaim
metadata: {{name: pair, namespace: research}}
spec:
  devices:
    requests:
    - name: gpus
      exactly:
        deviceClassName: gpu.nvidia.com
        count: 2
        selectors:
        - cel: {{expression: "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')"}}
    - name: small
      firstAvailable:
      - name: mig
        deviceClassName: mig.nvidia.com
      - name: whole
        deviceClassName: gpu.nvidia.com
        allocationMode: All
    constraints:
    - requests: [gpus]
      matchAttribute: resource.kubernetes.io/pcieRoot
    config:
    - requests: [small/mig]
      opaque:
        driver: gpu.nvidia.com
        parameters: {{apiVersion: resource.nvidia.com/v1beta1, kind: MigDeviceConfig}}
status:
  allocation:
    devices:
      results:
      - {{request: gpus, driver: gpu.nvidia.com, pool: node-a, device: gpu-0}}
      - {{request: gpus, driver: gpu.nvidia.com, pool: node-a, device: gpu-1}}
    nodeSelector:
      nodeSelectorTerms:
      - matchFields:
        - {{key: metadata.name, operator: In, values: [node-a]}}
  reservedFor:
  - {{resource: pods, name: trainer-0, uid: 1234}}
"""

# The same claim as v1beta1 writes it: a request's fields inline, without exactly.
CLAIM_BETA1 = """\
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaim
metadata: {name: pair, namespace: research}
spec:
  devices:
    requests:
    - name: gpus
      deviceClassName: gpu.nvidia.com
      count: 2
      selectors:
      - cel: {expression: "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')"}
    - name: small
      firstAvailable:
      - name: mig
        deviceClassName: mig.nvidia.com
      - name: whole
        deviceClassName: gpu.nvidia.com
        allocationMode: All
    constraints:
    - requests: [gpus]
      matchAttribute: resource.kubernetes.io/pcieRoot
    config:
    - requests: [small/mig]
      opaque:
        driver: gpu.nvidia.com
        parameters: {apiVersion: resource.nvidia.com/v1beta1, kind: MigDeviceConfig}
status:
  allocation:
    devices:
      results:
      - {request: gpus, driver: gpu.nvidia.com, pool: node-a, device: gpu-0}
      - {request: gpus, driver: gpu.nvidia.com, pool: node-a, device: gpu-1}
    nodeSelector:
      nodeSelectorTerms:
      - matchFields:
        - {key: metadata.name, operator: In, values: [node-a]}
  reservedFor:
  - {resource: pods, name: trainer-0, uid: "1234"}
"""

TEMPLATE = """\
apiVersion: resource.k8s.io/{version}
kind: ResourceClaimTemplate
metadata: {{name: one-gpu, namespace: research}}
spec:
  metadata:
    labels: {{team: research}}
  spec:
    devices:
      requests:
      - name: gpu
        {body}
"""


def _clean(m: Manifests) -> Manifests:
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    return m


def _left_out(m: Manifests) -> list[ManifestError]:
    return [w for w in m.problems.warnings if w.code == LEFT_OUT]


def _field_warnings(m: Manifests) -> list[ManifestError]:
    """The warnings about fields: unknown ones, and those gpufleet does not read."""
    return [w for w in _left_out(m) if "unknown field" in w.message or "not honoured" in w.message]


@pytest.mark.parametrize("version", ["v1", "v1beta2"])
def test_a_v1_slice_reads_devices_attributes_capacity_and_counters(version: str) -> None:
    m = _clean(manifests(SLICE_V1.format(version=version)))
    assert not _field_warnings(m)
    (s,) = m.resource_slices
    assert (s.driver, s.pool.name, s.pool.generation, s.pool.resource_slice_count) == ("gpu.nvidia.com", "node-a", 2, 1)
    assert (s.node_selection, s.node_name, s.api_version) == ("nodeName", "node-a", f"resource.k8s.io/{version}")
    (d,) = s.devices
    # bare names are the driver's, kept fully qualified (as matchAttribute and CEL's domains name them)
    assert d.attributes == {
        "gpu.nvidia.com/type": DeviceAttribute("string", "gpu"),
        "gpu.nvidia.com/productName": DeviceAttribute("string", "NVIDIA H100 80GB HBM3"),
        "gpu.nvidia.com/cudaComputeCapability": DeviceAttribute("version", "9.0.0"),
        "resource.kubernetes.io/pcieRoot": DeviceAttribute("string", "pci0000:15"),
        "gpu.nvidia.com/index": DeviceAttribute("int", 0),
        "gpu.nvidia.com/coherent": DeviceAttribute("bool", False),
    }
    assert d.capacity == {"gpu.nvidia.com/memory": Fraction(80 * 2**30)}
    assert d.text("productName", s.driver) == "NVIDIA H100 80GB HBM3" and d.attribute("index", s.driver) == 0
    assert [(c.counter_set, dict(c.counters)) for c in d.consumes_counters] == [
        ("gpu-0-counter-set", {"memory": Fraction(80 * 2**30)})]
    assert [(c.name, dict(c.counters)) for c in s.shared_counters] == [
        ("gpu-0-counter-set", {"memory": Fraction(80 * 2**30)})]
    assert m.counts()["ResourceSlice"] == 1


def test_a_v1beta1_slice_reads_as_the_same_devices() -> None:
    v1 = _clean(manifests(SLICE_V1.format(version="v1"))).resource_slices[0]
    beta1 = _clean(manifests(SLICE_BETA1)).resource_slices[0]
    assert beta1.devices == v1.devices and beta1.shared_counters == v1.shared_counters
    assert beta1.api_version == "resource.k8s.io/v1beta1"


@pytest.mark.parametrize("version", ["v1", "v1beta2", "v1beta1"])
def test_a_device_class_reads_selectors_and_config(version: str) -> None:
    m = _clean(manifests(CLASS.format(version=version)))
    (c,) = m.device_classes
    assert c.name == "gpu.nvidia.com" and c.selectors == ("device.driver == 'gpu.nvidia.com'",)
    assert [(o.driver, o.parameters["kind"]) for o in c.config] == [("gpu.nvidia.com", "GpuConfig")]
    assert c.extended_resource_name is None and not m.problems.warnings


def test_an_extended_resource_name_is_read() -> None:
    m = _clean(manifests(CLASS.format(version="v1") + "  extendedResourceName: nvidia.com/gpu\n"))
    assert m.device_classes[0].extended_resource_name == "nvidia.com/gpu"
    assert not _left_out(m)  # planned: gpufleet.cluster.dra_claims.extended_need (tests/dra)


@pytest.mark.parametrize("text", [CLAIM_V1.format(version="v1"), CLAIM_V1.format(version="v1beta2"), CLAIM_BETA1])
def test_a_claim_reads_requests_constraints_config_and_status(text: str) -> None:
    m = _clean(manifests(text))
    assert not m.problems.warnings, [str(w) for w in m.problems.warnings]
    (c,) = m.resource_claims
    assert c.key == "research/pair"
    gpus, small = c.spec.requests
    assert gpus.name == "gpus" and gpus.exactly is not None and not gpus.first_available
    assert (gpus.exactly.device_class_name, gpus.exactly.count, gpus.exactly.allocation_mode) == (
        "gpu.nvidia.com", 2, "ExactCount")
    assert gpus.exactly.selectors == ("device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')",)
    assert small.exactly is None
    assert [(s.name, s.selection) for s in small.first_available] == [
        ("mig", DeviceSelection("mig.nvidia.com")),
        ("whole", DeviceSelection("gpu.nvidia.com", allocation_mode="All"))]
    (constraint,) = c.spec.constraints
    assert (constraint.requests, constraint.match_attribute) == (("gpus",), "resource.kubernetes.io/pcieRoot")
    (config,) = c.spec.config
    assert config.requests == ("small/mig",) and config.opaque.driver == "gpu.nvidia.com"
    assert c.allocation is not None and c.allocation.node_name == "node-a"
    assert [(d.request, d.pool, d.device) for d in c.allocation.devices] == [
        ("gpus", "node-a", "gpu-0"), ("gpus", "node-a", "gpu-1")]
    assert [(r.resource, r.name, r.uid) for r in c.reserved_for] == [("pods", "trainer-0", "1234")]


@pytest.mark.parametrize(("version", "body"), [
    ("v1", "exactly: {deviceClassName: gpu.nvidia.com}"),
    ("v1beta2", "exactly: {deviceClassName: gpu.nvidia.com}"),
    ("v1beta1", "deviceClassName: gpu.nvidia.com"),
])
def test_a_claim_template_reads_its_claim_and_metadata(version: str, body: str) -> None:
    m = _clean(manifests(TEMPLATE.format(version=version, body=body)))
    (t,) = m.resource_claim_templates
    assert t.key == "research/one-gpu" and dict(t.claim_labels) == {"team": "research"}
    (q,) = t.spec.requests
    assert q.name == "gpu" and q.exactly == DeviceSelection("gpu.nvidia.com")


# ---- errors name the field and the line -------------------------------------------------------------------------

def _only_error(m: Manifests) -> ManifestError:
    assert len(m.problems.errors) == 1, [str(e) for e in m.problems.errors]
    return m.problems.errors[0]


def test_a_request_with_exactly_and_first_available_is_an_error_at_its_line() -> None:
    text = TEMPLATE.format(version="v1", body="exactly: {deviceClassName: gpu.nvidia.com}\n"
                           "        firstAvailable: [{name: a, deviceClassName: gpu.nvidia.com}]")
    e = _only_error(manifests(text, "claims.yaml"))
    assert (e.file, e.line, e.kind, e.name) == ("claims.yaml", 12, "ResourceClaimTemplate", "research/one-gpu")
    assert e.field == "spec.spec.devices.requests[0].firstAvailable"
    assert "exactly one of exactly and firstAvailable, not both" in e.message and e.fix
    assert not manifests(text).resource_claim_templates  # an object with errors is not kept


def test_a_v1_request_written_the_v1beta1_way_is_an_error_and_its_fields_unknown() -> None:
    m = manifests(TEMPLATE.format(version="v1", body="deviceClassName: gpu.nvidia.com"), "t.yaml")
    e = _only_error(m)
    assert e.field == "spec.spec.devices.requests[0].exactly" and "a request has exactly one of" in e.message
    (w,) = _field_warnings(m)
    assert w.field == "spec.spec.devices.requests[0].deviceClassName" and w.line == 11
    assert "unknown field 'deviceClassName' in ResourceClaimTemplate" in w.message


def test_a_v1beta1_request_with_exactly_is_said_unknown() -> None:
    m = manifests(TEMPLATE.format(version="v1beta1", body="deviceClassName: gpu.nvidia.com\n"
                                  "        exactly: {deviceClassName: gpu.nvidia.com}"))
    assert not m.problems.errors
    assert [w.field for w in _field_warnings(m)] == ["spec.spec.devices.requests[0].exactly"]


@pytest.mark.parametrize(("patch", "field", "says"), [
    (("nodeName: node-a", "nodeName: node-a\n  allNodes: true"), "spec.allNodes",
     "exactly one of nodeName, nodeSelector, allNodes and perDeviceNodeSelection, got nodeName, allNodes"),
    (("resourceSliceCount: 1", "resourceSliceCount: 0"), "spec.pool.resourceSliceCount", "must be at least 1"),
    (("type: {string: gpu}", "type: {string: gpu, int: 3}"), "spec.devices[0].attributes.type.string",
     "exactly one of int, bool, string or version, got int, string"),
    (("cudaComputeCapability: {version: 9.0.0}", "cudaComputeCapability: {version: '9.0'}"),
     "spec.devices[0].attributes.cudaComputeCapability.version", "is not a semantic version"),
    (("- name: gpu-0\n    attributes", "- name: GPU_0\n    attributes"), "spec.devices[0].name",
     "is not a DNS label"),
    (("memory: {value: 80Gi}\n    consumesCounters", "memory: {value: lots}\n    consumesCounters"),
     "spec.devices[0].capacity.memory.value", "lots"),
])
def test_a_bad_slice_field_is_an_error_naming_it(patch: tuple[str, str], field: str, says: str) -> None:
    text = SLICE_V1.format(version="v1")
    assert patch[0] in text
    e = _only_error(manifests(text.replace(patch[0], patch[1], 1), "slices.yaml"))
    assert e.field == field and says in e.message, str(e)
    assert e.file == "slices.yaml" and e.line is not None and e.line > 1 and e.kind == "ResourceSlice"


def test_a_constraint_naming_no_request_and_an_unqualified_attribute_are_errors() -> None:
    text = CLAIM_V1.format(version="v1").replace("requests: [gpus]\n      matchAttribute: "
                                                 "resource.kubernetes.io/pcieRoot",
                                                 "requests: [gpu]\n      matchAttribute: pcieRoot")
    errors = manifests(text).problems.errors
    assert [(e.field, e.message) for e in errors] == [
        ("spec.devices.constraints[0].requests[0]", "gpu is not a request of this claim"),
        ("spec.devices.constraints[0].matchAttribute",
         "matchAttribute 'pcieRoot' is not a fully qualified attribute name")]


def test_an_unread_version_is_refused_and_an_unread_kind_said() -> None:
    m = manifests(CLASS.format(version="v1alpha3"))
    e = _only_error(m)
    assert e.field == "apiVersion" and "resource.k8s.io/v1, resource.k8s.io/v1beta2, resource.k8s.io/v1beta1" in \
        e.message
    m = manifests("apiVersion: resource.k8s.io/v1alpha3\nkind: DeviceTaintRule\nmetadata: {name: x}\n")
    assert not m.problems.errors and "DeviceTaintRule is not a workload kind gpufleet reads" in \
        _left_out(m)[0].message


# ---- unknown and unsupported fields ------------------------------------------------------------------------------

def test_unknown_and_unsupported_fields_are_said_as_left_out() -> None:
    text = SLICE_V1.format(version="v1").replace("    capacity:\n", "    bindsToNode: true\n    colour: blue\n"
                                                 "    capacity:\n", 1)
    m = manifests(text, "s.yaml")
    assert not m.problems.errors and m.resource_slices
    said = {(w.field, w.message) for w in _field_warnings(m)}
    assert ("spec.devices[0].bindsToNode", "bindsToNode is not honoured by gpufleet (device binding "
            "(DRADeviceBindingConditions) is not implemented; left out)") in said
    assert ("spec.devices[0].colour", "unknown field 'colour' in ResourceSlice: it is ignored (left out)") in said


def test_strict_makes_unknown_fields_errors(tmp_path: Path) -> None:
    f = tmp_path / "slice.yaml"
    f.write_text(SLICE_V1.format(version="v1").replace("  driver:", "  drivr: x\n  driver:"))
    assert runner.invoke(app, ["validate", str(f)]).exit_code == 0
    result = runner.invoke(app, ["validate", str(f), "--strict"])
    assert result.exit_code == 1 and "unknown field 'drivr' in ResourceSlice" in result.output
    assert f"{f}:5: ResourceSlice node-a-gpu: spec.drivr: unknown field" in result.output


# ---- pods' claims -------------------------------------------------------------------------------------------------

POD = """\
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: research}
spec:
  resourceClaims:
  - name: gpus
    resourceClaimTemplateName: one-gpu
  - name: shared
    resourceClaimName: shared-mig
  initContainers:
  - name: warm
    resources:
      claims: [{name: shared}]
  containers:
  - name: main
    resources:
      requests: {cpu: "2"}
      claims:
      - name: gpus
      - name: shared
        request: mig
"""


def test_a_pods_claims_are_read_onto_it_with_the_containers_using_them() -> None:
    m = manifests(POD, "pod.yaml")
    assert not m.problems.errors
    (pod,) = m.pods
    assert pod.resource_claims == (
        PodResourceClaim("gpus", resource_claim_template_name="one-gpu", used_by=(ContainerClaim("main"),)),
        PodResourceClaim("shared", resource_claim_name="shared-mig",
                         used_by=(ContainerClaim("main", "mig"), ContainerClaim("warm"))),
    )
    assert pod.template.gpu.kind == "none"  # the claims become a demand when workloads are built (dra_claims)
    # Claims are planned (gpufleet.cluster.dra_claims): nothing about them is said as left out.
    assert not [w for w in m.problems.warnings if w.field.startswith("spec.resourceClaims") and w.code == LEFT_OUT]


def test_a_jobs_template_claims_ride_on_its_pods() -> None:
    text = """\
apiVersion: batch/v1
kind: Job
metadata: {name: pair, namespace: research}
spec:
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      resourceClaims: [{name: gpus, resourceClaimTemplateName: one-gpu}]
      containers: [{name: c, resources: {claims: [{name: gpus}]}}]
"""
    m = manifests(text, "job.yaml")
    assert not m.problems.errors
    template = m.controllers.owners[0].workloads[0].pod_sets[0].template
    assert [c.name for c in template.resource_claims] == ["gpus"]
    assert not [w for w in m.problems.warnings if "resourceClaims" in w.field and w.code == LEFT_OUT]


@pytest.mark.parametrize(("patch", "field", "says"), [
    (("    resourceClaimName: shared-mig", "    resourceClaimName: shared-mig\n    resourceClaimTemplateName: x"),
     "spec.resourceClaims[1].resourceClaimName", "exactly one of resourceClaimName and resourceClaimTemplateName, "
     "not both"),
    (("  - name: shared\n    resourceClaimName", "  - name: gpus\n    resourceClaimName"),
     "spec.resourceClaims[1].name", "claim gpus is listed twice"),
    (("      - name: gpus\n", "      - name: gpu\n"), "spec.containers[0].resources.claims[0].name",
     "container main uses claim gpu, which spec.resourceClaims does not list"),
    (("  - name: gpus\n    resourceClaimTemplateName", "  - name: Gpus\n    resourceClaimTemplateName"),
     "spec.resourceClaims[0].name", "claim name 'Gpus' is not a DNS label"),
])
def test_a_bad_pod_claim_is_an_error_naming_its_field(patch: tuple[str, str], field: str, says: str) -> None:
    assert patch[0] in POD
    errors = manifests(POD.replace(patch[0], patch[1], 1), "pod.yaml").problems.errors
    assert any(e.field == field and says in e.message and e.line and e.line > 3 for e in errors), \
        [str(e) for e in errors]


def test_claims_naming_objects_the_input_lacks_are_warned_about() -> None:
    text = POD + "---\n" + TEMPLATE.format(version="v1", body="exactly: {deviceClassName: gpu.nvidia.com}") + \
        "---\n" + CLASS.format(version="v1").replace("name: gpu.nvidia.com}", "name: other}")
    m = manifests(text)
    assert not m.problems.errors
    messages = {w.message for w in m.problems.warnings}
    assert "claim shared names ResourceClaim research/shared-mig, which is not in the input; kube-scheduler keeps " \
        "the pod pending until it exists" in messages
    assert "request gpu names DeviceClass gpu.nvidia.com, which is not in the input" in messages
    # the template exists: its request is checked against what the container names
    text = text.replace("      - name: gpus\n", "      - name: gpus\n        request: nope\n")
    messages = {w.message for w in manifests(text).problems.warnings}
    assert "container main uses request nope of claim gpus, which ResourceClaimTemplate research/one-gpu does not " \
        "have" in messages


def test_distinct_attribute_is_read_and_a_constraint_takes_exactly_one_attribute() -> None:
    spread = CLAIM_V1.format(version="v1").replace("matchAttribute: resource.kubernetes.io/pcieRoot",
                                                   "distinctAttribute: resource.kubernetes.io/pcieRoot")
    m = manifests(spread)
    assert not m.problems.errors and not [w for w in m.problems.warnings if "distinct" in w.message]
    (constraint,) = m.resource_claims[0].spec.constraints
    assert (constraint.match_attribute, constraint.distinct_attribute) == (None, "resource.kubernetes.io/pcieRoot")
    both = CLAIM_V1.format(version="v1").replace("matchAttribute: resource.kubernetes.io/pcieRoot",
                                                 "matchAttribute: resource.kubernetes.io/pcieRoot\n"
                                                 "      distinctAttribute: gpu.nvidia.com/uuid")
    e = _only_error(manifests(both))
    assert e.field == "spec.devices.constraints[0].distinctAttribute" and "exactly one of" in e.message
