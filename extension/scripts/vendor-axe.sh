#!/usr/bin/env bash
# Copy a pinned axe-core from the npm registry into extension/vendor/axe.min.js.
#
# The vendored file is committed, so the extension loads unpacked straight from a fresh clone
# (and CI needs no npm). Run this (or `make extension-vendor`) only to re-vendor or to check that
# the committed copy matches the pinned release: the script verifies the registry's integrity
# hash of the tarball and prints the sha256 of the extracted file.
set -euo pipefail
AXE_VERSION="${AXE_VERSION:-4.14.1}"
here="$(cd "$(dirname "$0")/.." && pwd)"
dest="$here/vendor"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

tarball_url="https://registry.npmjs.org/axe-core/-/axe-core-${AXE_VERSION}.tgz"
meta_url="https://registry.npmjs.org/axe-core/${AXE_VERSION}"

curl -fsSL "$meta_url" -o "$work/meta.json"
integrity="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["dist"]["integrity"])' "$work/meta.json")"
curl -fsSL "$tarball_url" -o "$work/axe.tgz"
actual="sha512-$(openssl dgst -sha512 -binary "$work/axe.tgz" | base64 -w0)"
if [ "$integrity" != "$actual" ]; then
    echo "axe-core ${AXE_VERSION}: integrity mismatch (registry $integrity, got $actual)" >&2
    exit 1
fi
tar -xzf "$work/axe.tgz" -C "$work" package/axe.min.js package/LICENSE
mkdir -p "$dest"
cp "$work/package/axe.min.js" "$dest/axe.min.js"
cp "$work/package/LICENSE" "$dest/axe-core.LICENSE"
echo "$AXE_VERSION" > "$dest/axe-core.VERSION"
echo "vendored axe-core $AXE_VERSION: $(sha256sum "$dest/axe.min.js" | cut -d' ' -f1)"
