"""Container image references as the kubelet and containerd see them.

Syntax: the kubelet's ``applyDefaultImageTag`` parses with distribution/reference ``ParseNormalizedNamed``
(repository path must be lowercase, ``normalize.go``; then the grammar of ``regexp.go``); an unparsable
reference gives InvalidImageName. Pulls: the emulator has
no registry, so an image tagged ``:missing`` is the one that does not exist (containerd's NotFound text).
"""

from __future__ import annotations

import re

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[a-fA-F0-9:]+\])"
_NAME = rf"(?:{_HOST}(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"({_NAME})(?::({_TAG}))?(?:@({_DIGEST}))?")
_MAX_NAME = 255


def invalid_reason(image: str) -> str | None:
    """The kubelet's InvalidImageName message for an unparsable reference (None: it parses)."""
    remote = _remote(image)
    if remote.lower() != remote:
        detail = f"invalid reference format: repository name ({remote}) must be lowercase"
    else:
        match = _REFERENCE.fullmatch(image)
        if match is not None and len(match.group(1)) <= _MAX_NAME:
            return None
        detail = "invalid reference format"
    return f'Failed to apply default image tag "{image}": couldn\'t parse image name "{image}": {detail}'


def _remote(image: str) -> str:
    """The repository path without registry and tag, split as splitDockerDomain does."""
    first, slash, rest = image.partition("/")
    registry = bool(slash) and (
        any(c in first for c in ".:") or first == "localhost" or first.lower() != first
    )
    return (rest if registry else image).partition(":")[0]


def canonical(image: str) -> str:
    """docker.io/library/busybox:latest for busybox, as containerd names what it pulls."""
    name, at, digest = image.partition("@")
    first, slash, _ = name.partition("/")
    if not slash:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    if not at and ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return name + at + digest


def missing(image: str) -> bool:
    return image.rsplit("/", 1)[-1].partition("@")[0].endswith(":missing")


def pull_error(image: str) -> str:
    """containerd's error for an image whose tag does not exist in the registry."""
    ref = canonical(image)
    return (
        f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": '
        f'failed to resolve reference "{ref}": {ref}: not found'
    )
