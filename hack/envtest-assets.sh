#!/usr/bin/env bash
# Prints a directory holding kube-apiserver and etcd for envtest (KUBEBUILDER_ASSETS), building
# them on first use: a thin wrapper around `projectmcp envtest --print-path`, which holds the
# logic (internal/controlplane). Progress goes to stderr; stdout carries only the directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec go run ./cmd/projectmcp envtest --print-path
