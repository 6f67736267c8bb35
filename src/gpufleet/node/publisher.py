"""This Node's labels and inventory annotation, kept equal to what the agent discovered; nothing else touched.

The agent owns exactly the labels it computed, and remembers them in the annotation
``gpufleet.io/node-agent-labels`` (comma-separated keys), so that a label it wrote before and no longer
computes (a MIG profile that is gone, a sharing setting removed) is deleted, while labels written by anybody
else, NVIDIA's GPU Feature Discovery included, are never changed. Writes are JSON merge patches of
``metadata.labels`` and ``metadata.annotations`` only, sent only when something differs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.resources import NODES

log = logging.getLogger(__name__)

OWNED_LABELS_ANNOTATION = "gpufleet.io/node-agent-labels"

JsonDict = dict[str, Any]


def node_patch(node: Mapping[str, Any], labels: Mapping[str, str], annotations: Mapping[str, str]) -> JsonDict | None:
    """The merge patch that makes ``node`` carry ``labels`` and ``annotations``; None when it already does."""
    meta = node.get("metadata") or {}
    have_labels: Mapping[str, str] = meta.get("labels") or {}
    have_notes: Mapping[str, str] = meta.get("annotations") or {}
    owned_before = {k for k in str(have_notes.get(OWNED_LABELS_ANNOTATION, "")).split(",") if k}
    label_patch: dict[str, str | None] = {k: v for k, v in labels.items() if have_labels.get(k) != v}
    for key in sorted(owned_before - set(labels)):
        if key in have_labels:
            label_patch[key] = None
    owned = ",".join(sorted(labels))
    wanted_notes = {**annotations, OWNED_LABELS_ANNOTATION: owned}
    note_patch = {k: v for k, v in wanted_notes.items() if have_notes.get(k) != v}
    if not label_patch and not note_patch:
        return None
    metadata: JsonDict = {}
    if label_patch:
        metadata["labels"] = label_patch
    if note_patch:
        metadata["annotations"] = note_patch
    return {"metadata": metadata}


class NodePublisher:
    def __init__(self, client: KubeClient, node_name: str) -> None:
        self.client = client
        self.node_name = node_name

    def publish(self, labels: Mapping[str, str], annotations: Mapping[str, str]) -> bool:
        """Read the Node, patch what differs; True when a patch was sent. Raises the client's errors."""
        node = self.client.get(NODES, self.node_name)
        patch = node_patch(node, labels, annotations)
        if patch is None:
            return False
        self.client.patch(NODES, self.node_name, patch)
        changed = sorted(patch["metadata"].get("labels", {}))
        log.info("node %s: %d label(s) and %d annotation(s) written", self.node_name, len(changed),
                 len(patch["metadata"].get("annotations", {})), extra={"labels": changed})
        return True
