"""Building blocks shared by the ray.io/v1 types: the Struct base, Kubernetes scalar and embedded types,
metav1.Condition and the annotations the CRD generator reads.

Role: one place that says how a Kubernetes-shaped field is spelled in Python and in the generated CRD.

Invariants:
- Every ray.io struct derives from :class:`RayStruct` (frozen, keyword-only, camelCase on the wire,
  defaults omitted when encoding), so ``to_builtins(decode(obj))`` returns what the user wrote minus the
  values that equal a default.
- An optional field defaults to None when KubeRay's Go field is a pointer (unset differs from zero), to
  the Go zero value when it is a plain ``omitempty`` field, and to the CRD default when the CRD has one.
- Kubernetes types that raybus does not interpret (pod templates, Services, env vars, resources,
  security contexts, network-policy rules) stay ``dict[str, Any]``: they are copied
  into API objects, never read field by field here. Their CRD schema keeps unknown fields.
- Whatever the CRD generator needs beyond the Python type (int32 format, int-or-string, CEL rules,
  descriptions) lives in ``msgspec.Meta`` annotations, so the types are the single source of the CRDs.

Not here: decoding helpers (``schema.ray.codec``) and the generator itself (``schema.crd``).
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

import msgspec
from msgspec import Meta

from schema.ray.conventions import MANAGED_BY_KUBERAY, MANAGED_BY_MULTIKUEUE

MAX_INT32: Final = 2_147_483_647

QUANTITY_PATTERN: Final = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]"
    r"|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

PRESERVE: Final[dict[str, Any]] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
"""Schema fragment of an embedded Kubernetes object: kept whole, validated by the API server elsewhere."""


def crd_default(value: str | int) -> Meta:
    """Mark a field's Python default as also being the CRD default, which the API server fills in.

    Fields whose default is only Go's zero value (``omitempty``) carry no mark, so the API server
    stores nothing for them, as with KubeRay. The generator checks that both defaults agree.
    """
    return Meta(extra_json_schema={"default": value})


class RayStruct(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """Base of every ray.io/v1 struct (options inherited by subclasses)."""


Int32 = Annotated[int, Meta(extra_json_schema={"format": "int32"})]
Int64 = Annotated[int, Meta(extra_json_schema={"format": "int64"})]
Time = Annotated[str, Meta(extra_json_schema={"format": "date-time"})]
"""An RFC3339 timestamp as Kubernetes writes it (``2024-01-02T03:04:05Z``); parsed by the code that needs it."""

Quantity = Annotated[
    int | str,
    Meta(extra_json_schema={"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN}),
]
"""A resource.Quantity: ``"500m"``, ``"1Gi"`` or a bare integer."""

StringMap = dict[str, str]

# Embedded Kubernetes types: free-form dicts whose CRD schema preserves unknown fields.
PodTemplateSpec = Annotated[dict[str, Any], Meta(extra_json_schema=PRESERVE)]
Service = Annotated[dict[str, Any], Meta(extra_json_schema=PRESERVE)]
ResourceRequirements = Annotated[dict[str, Any], Meta(extra_json_schema=PRESERVE)]
SecurityContext = Annotated[dict[str, Any], Meta(extra_json_schema=PRESERVE)]
EnvVar = Annotated[dict[str, Any], Meta(extra_json_schema=PRESERVE)]
EnvFromSource = Annotated[dict[str, Any], Meta(extra_json_schema=PRESERVE)]
EnvVarSource = Annotated[dict[str, Any], Meta(extra_json_schema=PRESERVE)]
VolumeMount = Annotated[dict[str, Any], Meta(extra_json_schema=PRESERVE)]
IngressTLS = Annotated[dict[str, Any], Meta(extra_json_schema=PRESERVE)]
NetworkPolicyIngressRule = Annotated[dict[str, Any], Meta(extra_json_schema=PRESERVE)]
NetworkPolicyEgressRule = Annotated[dict[str, Any], Meta(extra_json_schema=PRESERVE)]


ManagedBy = Annotated[
    str,
    Meta(
        description=(
            "The controller that manages this object. Anything other than 'ray.io/kuberay-operator' "
            "makes the operator skip it entirely. Immutable."
        ),
        extra_json_schema={
            "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "the managedBy field is immutable"},
                {
                    "rule": f"self in ['{MANAGED_BY_KUBERAY}', '{MANAGED_BY_MULTIKUEUE}']",
                    "message": (
                        "the managedBy field value must be either "
                        f"'{MANAGED_BY_KUBERAY}' or '{MANAGED_BY_MULTIKUEUE}'"
                    ),
                },
            ]
        },
    ),
]

ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(RayStruct, frozen=True, kw_only=True):
    """A metav1.Condition: the latest observation of one aspect of an object's state."""

    type: Annotated[
        str,
        Meta(
            max_length=316,
            pattern=(
                r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
            ),
        ),
    ]
    status: ConditionStatus
    reason: Annotated[str, Meta(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")]
    # Go's metav1.Condition always writes message and lastTransitionTime, so they are required here too.
    message: Annotated[str, Meta(max_length=32768)]
    last_transition_time: Time
    observed_generation: Annotated[Int64, Meta(ge=0)] | None = None


ConditionList = Annotated[
    tuple[Condition, ...],
    Meta(extra_json_schema={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}),
]
