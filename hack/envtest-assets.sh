#!/usr/bin/env bash
# Prints a directory that holds kube-apiserver and etcd for envtest (KUBEBUILDER_ASSETS).
#
# Order of preference:
#   1. KUBEBUILDER_ASSETS, when it is set and holds both binaries;
#   2. a cached build from an earlier run (instant);
#   3. setup-envtest, when it can download (it is given a short deadline and fails fast);
#   4. a build from the Go module proxy: kube-apiserver from k8s.io/kubernetes at the patch
#      release matching go.mod's k8s.io/api (staging modules replaced by their published
#      versions) and etcd from go.etcd.io/etcd/server/v3 through a tiny main calling etcdmain.Main.
#
# The result is cached under ${XDG_DATA_HOME:-~/.local/share}/projectmcp/envtest/<version>, never
# inside the repository. Progress goes to stderr; stdout carries only the directory.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log() { echo "envtest: $*" >&2; }

have_assets() { [ -x "$1/kube-apiserver" ] && [ -x "$1/etcd" ]; }

if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  if have_assets "$KUBEBUILDER_ASSETS"; then
    log "using KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
    echo "$KUBEBUILDER_ASSETS"
    exit 0
  fi
  log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks kube-apiserver or etcd; looking elsewhere"
fi

# The Kubernetes release follows go.mod: k8s.io/api v0.M.P pairs with Kubernetes v1.M.P.
api_version=$(cd "$repo" && go list -m -f '{{.Version}}' k8s.io/api)
k8s_version="v1.${api_version#v0.}"
cache="${XDG_DATA_HOME:-$HOME/.local/share}/projectmcp/envtest/${k8s_version}"

if have_assets "$cache"; then
  log "using cached binaries for Kubernetes ${k8s_version} in $cache"
  echo "$cache"
  exit 0
fi

# setup-envtest downloads release archives; where the network only reaches module proxies it
# fails within seconds and we fall through to building.
if [ "${ENVTEST_SKIP_DOWNLOAD:-}" != "1" ]; then
  log "trying setup-envtest for Kubernetes ${k8s_version#v} (download)"
  if dir=$(cd "$repo" && timeout 120 go tool setup-envtest use -p path "${k8s_version#v}" 2>/dev/null) &&
    have_assets "$dir"; then
    log "setup-envtest provided $dir"
    echo "$dir"
    exit 0
  fi
  log "setup-envtest could not download; building from the Go module proxy instead"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$cache"

# kube-apiserver: a throwaway module that requires k8s.io/kubernetes and replaces every staging
# module (which k8s.io/kubernetes points at ./staging/src/...) by its published version.
log "building kube-apiserver ${k8s_version} from k8s.io/kubernetes (about six minutes on a cold cache)"
mkdir -p "$work/apiserver"
(
  cd "$work/apiserver"
  go mod init envtest.local/apiserver >/dev/null 2>&1
  modfile=$(go mod download -json "k8s.io/kubernetes@${k8s_version}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -n "$modfile" ] || { log "cannot download k8s.io/kubernetes@${k8s_version}"; exit 1; }
  go mod edit -require="k8s.io/kubernetes@${k8s_version}"
  for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$modfile"); do
    go mod edit -replace="$m=$m@${api_version}"
  done
  printf 'package main\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver"\n' >tools.go
  go mod tidy >&2 2>&1 || true
  minor=${k8s_version#v1.}
  minor=${minor%%.*}
  pkg=k8s.io/component-base/version
  CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X $pkg.gitVersion=${k8s_version} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor} -X $pkg.gitTreeState=clean" \
    -o "$cache/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
)
mv "$cache/kube-apiserver.tmp" "$cache/kube-apiserver"

# etcd: the server version k8s.io/kubernetes itself requires.
etcd_version=$(cd "$work/apiserver" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
log "building etcd ${etcd_version} from go.etcd.io/etcd/server/v3"
mkdir -p "$work/etcd"
(
  cd "$work/etcd"
  go mod init envtest.local/etcd >/dev/null 2>&1
  cat >main.go <<'GO'
// Command etcd runs the etcd server for envtest.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  go get "go.etcd.io/etcd/server/v3@${etcd_version}" >&2 2>&1
  go mod tidy >&2 2>&1
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$cache/etcd.tmp" .
)
mv "$cache/etcd.tmp" "$cache/etcd"

log "built kube-apiserver and etcd into $cache"
echo "$cache"
