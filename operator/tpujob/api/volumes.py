"""The volumes of a job's pods (spec.pod.volumes): Kubernetes' core/v1 volume sources training teams on GKE
use, with Kubernetes' names, meanings, bounds and patterns (Secrets, ConfigMaps, claims for Filestore or
Parallelstore, scratch and /dev/shm, inline CSI volumes such as Cloud Storage FUSE). pod.py holds the rest of
the pod.
"""

from __future__ import annotations

from pydantic import Field

from tpujob.api.base import CONFIG_KEY_PATTERN, DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN, ApiModel, Quantity

# Kubernetes' bound on file modes (pkg/apis/core/validation): 0 to 0777.
MAX_FILE_MODE = 0o777
# Bounds for the CRD's cost estimate (see pod.py), far past what a team writes.
MAX_VOLUMES = 64
MAX_KEYS = 64  # keys of a Secret or ConfigMap volume
MAX_ATTRIBUTES = 32


class KeyToPath(ApiModel):
    """One key of a Secret or ConfigMap as a file."""

    key: str = Field(pattern=CONFIG_KEY_PATTERN, max_length=253, description="The key.")
    path: str = Field(
        min_length=1, max_length=4096, description="The file's path in the volume (relative, no '..')."
    )
    mode: int | None = Field(
        default=None, ge=0, le=MAX_FILE_MODE, description="File mode bits, e.g. 0400 (256)."
    )


class EmptyDirVolumeSource(ApiModel):
    """Scratch space that lives as long as the pod."""

    medium: str | None = Field(
        default=None,
        pattern=r"^(Memory|HugePages(-[0-9]+[KMGT]i)?)?$",
        description="Unset: the node's disk. Memory: tmpfs in RAM (e.g. for /dev/shm), counted as memory.",
    )
    size_limit: Quantity | None = Field(default=None, description="At most this much, e.g. 64Gi.")


class SecretVolumeSource(ApiModel):
    """A Secret's keys as files."""

    secret_name: str = Field(
        pattern=DNS_SUBDOMAIN_PATTERN,
        max_length=253,
        description="Name of the Secret in the job's namespace.",
    )
    items: list[KeyToPath] = Field(
        default_factory=list,
        max_length=MAX_KEYS,
        description=f"Only these keys, as these paths. At most {MAX_KEYS}.",
    )
    default_mode: int | None = Field(
        default=None, ge=0, le=MAX_FILE_MODE, description="Mode bits of the files; default 0644 (420)."
    )
    optional: bool | None = Field(default=None, description="true: a missing Secret is an empty volume.")


class ConfigMapVolumeSource(ApiModel):
    """A ConfigMap's keys as files."""

    name: str = Field(
        pattern=DNS_SUBDOMAIN_PATTERN,
        max_length=253,
        description="Name of the ConfigMap in the job's namespace.",
    )
    items: list[KeyToPath] = Field(
        default_factory=list,
        max_length=MAX_KEYS,
        description=f"Only these keys, as these paths. At most {MAX_KEYS}.",
    )
    default_mode: int | None = Field(
        default=None, ge=0, le=MAX_FILE_MODE, description="Mode bits of the files; default 0644 (420)."
    )
    optional: bool | None = Field(default=None, description="true: a missing ConfigMap is an empty volume.")


class PersistentVolumeClaimVolumeSource(ApiModel):
    """A PersistentVolumeClaim, e.g. a Filestore or Parallelstore instance shared by every worker."""

    claim_name: str = Field(
        pattern=DNS_SUBDOMAIN_PATTERN, max_length=253, description="Name of the claim in the job's namespace."
    )
    read_only: bool | None = Field(default=None, description="true: every mount is read-only.")


class LocalObjectReference(ApiModel):
    """An object in the job's namespace, by name."""

    name: str = Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253, description="The object's name.")


class CSIVolumeSource(ApiModel):
    """An inline (ephemeral) CSI volume, e.g. a Cloud Storage bucket through the Cloud Storage FUSE CSI driver
    (driver gcsfuse.csi.storage.gke.io, volumeAttributes bucketName and mountOptions; the pod then needs the
    annotation gke-gcsfuse/volumes: "true")."""

    driver: str = Field(
        pattern=DNS_SUBDOMAIN_PATTERN,
        max_length=63,
        description="The CSI driver, e.g. gcsfuse.csi.storage.gke.io.",
    )
    read_only: bool | None = Field(default=None, description="true: the volume is read-only.")
    fs_type: str | None = Field(default=None, max_length=63, description="Filesystem type, e.g. ext4.")
    volume_attributes: dict[str, str] = Field(
        default_factory=dict,
        max_length=MAX_ATTRIBUTES,
        description=(
            "Driver settings, e.g. {bucketName: my-bucket, mountOptions: 'implicit-dirs'}. "
            f"At most {MAX_ATTRIBUTES}."
        ),
    )
    node_publish_secret_ref: LocalObjectReference | None = Field(
        default=None, description="A Secret the driver reads when it mounts the volume."
    )


class Volume(ApiModel):
    """A volume the pod's containers can mount: a name and exactly one source."""

    name: str = Field(
        pattern=DNS_LABEL_PATTERN, max_length=63, description="Volume name, unique in the pod; mounts use it."
    )
    empty_dir: EmptyDirVolumeSource | None = Field(default=None, description="Scratch space, disk or RAM.")
    secret: SecretVolumeSource | None = Field(default=None, description="A Secret's keys as files.")
    config_map: ConfigMapVolumeSource | None = Field(default=None, description="A ConfigMap's keys as files.")
    persistent_volume_claim: PersistentVolumeClaimVolumeSource | None = Field(
        default=None, description="A PersistentVolumeClaim (Filestore, Parallelstore, a disk)."
    )
    csi: CSIVolumeSource | None = Field(
        default=None, description="An inline CSI volume, e.g. a Cloud Storage bucket (Cloud Storage FUSE)."
    )
