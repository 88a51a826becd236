#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager and kube-scheduler v1.20.2 from Debian's
# source package and cache them outside the checkout. Recipe and its two traps:
# shared/research/local-control-plane.md. Rebuilds only what is missing. The long steps log to
# $OUT/build.log and print a heartbeat meanwhile (hack/lib/progress.sh); a failed step shows its log.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/progress.sh"

KUBE_VERSION=1.20.2
DEB_SOURCE_VERSION="1.20.5+really1.20.2-1.1+deb12u1"
CACHE="${TIDE_CACHE:-$HOME/.cache/tide}"
OUT="$CACHE/kubernetes/v$KUBE_VERSION"
BIN="$OUT/bin"
COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler)

missing=()
for c in "${COMPONENTS[@]}"; do [ -x "$BIN/$c" ] || missing+=("$c"); done
if [ ${#missing[@]} -eq 0 ]; then
  echo "kubernetes v$KUBE_VERSION binaries cached in $BIN"
  exit 0
fi

BUILD_LOG="$OUT/build.log"
logged() {  # logged WHAT CMD...: one long step, its output in the build log, a heartbeat meanwhile
  local what=$1 rc=0; shift
  echo "[$(elapsed_s)] $what"
  run_with_heartbeat "${what%% (*}" "$BUILD_LOG" "$@" || rc=$?
  if [ "$rc" -ne 0 ]; then
    tail -n 60 "$BUILD_LOG" >&2
    echo "error: $what failed (exit $rc; log: $BUILD_LOG)" >&2
    exit "$rc"
  fi
}
mkdir -p "$OUT"
: >"$BUILD_LOG"

need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "error: installing Debian packages needs root (or install them yourself: $*)" >&2
    exit 2
  fi
}

# deb-src for bookworm, same mirror as the binary entry.
if ! grep -rqs "^Types: deb-src" /etc/apt/sources.list.d/ && ! grep -qs "^deb-src" /etc/apt/sources.list; then
  need_root "a deb-src entry for bookworm"
  cat > /etc/apt/sources.list.d/tide-deb-src.sources <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  apt-get update -qq
fi

pkgs=()
command -v go >/dev/null || pkgs+=(golang-go)
[ -d /usr/share/gocode/src/github.com/modern-go/reflect2 ] || pkgs+=(golang-github-modern-go-reflect2-dev)
command -v dpkg-source >/dev/null || pkgs+=(dpkg-dev)
if [ ${#pkgs[@]} -gt 0 ]; then
  need_root "${pkgs[*]}"
  apt-get install -y -qq "${pkgs[@]}" >/dev/null
fi

WORK="$OUT/src"
TREE="$WORK/gopath/src/k8s.io/kubernetes"
if [ ! -f "$TREE/.tide-prepared" ]; then
  rm -rf "$WORK"
  mkdir -p "$WORK/dl" "$WORK/gopath/src/k8s.io"
  logged "downloading the kubernetes $DEB_SOURCE_VERSION source package" \
    bash -c 'cd "$1" && apt-get source --download-only "kubernetes=$2"' _ "$WORK/dl" "$DEB_SOURCE_VERSION"
  orig=$(ls "$WORK"/dl/kubernetes_*.orig.tar.* | head -n1)
  [ -n "$orig" ] || { echo "error: apt-get source gave no orig tarball for kubernetes $DEB_SOURCE_VERSION" >&2; exit 3; }
  mkdir -p "$TREE"
  logged "unpacking $(basename "$orig")" tar -xf "$orig" -C "$TREE" --strip-components=1
  rm -rf "$WORK/dl"

  # Trap 2: vendored reflect2 1.0.1 crashes Go >= 1.18 on the first custom-resource create.
  rm -rf "$TREE/vendor/github.com/modern-go/reflect2"
  cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 "$TREE/vendor/github.com/modern-go/reflect2"
  find "$TREE/vendor/github.com/modern-go/reflect2" -name '*_test.go' -delete

  export GOPATH="$WORK/gopath" GO111MODULE=off CGO_ENABLED=0 GOFLAGS=
  cd "$TREE"
  # Trap 1: the tarball lacks the generated OpenAPI definitions.
  logged "building openapi-gen" go build -v -o "$WORK/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
  echo "[$(elapsed_s)] finding the packages with OpenAPI definitions"
  dirs=$(grep -RIl --include='*.go' '+k8s:openapi-gen=' pkg cmd plugin vendor/k8s.io \
          | xargs -n1 dirname | sort -u \
          | grep -v -e '^vendor/k8s.io/code-generator' -e '^vendor/k8s.io/sample-apiserver' \
          | sed 's#^#k8s.io/kubernetes/#' | paste -sd, -)
  logged "generating the OpenAPI definitions" \
    "$WORK/openapi-gen" -i "$dirs" -p k8s.io/kubernetes/pkg/generated/openapi -O zz_generated.openapi \
    -h hack/boilerplate/boilerplate.generatego.txt -r "$WORK/openapi-report.txt"
  touch "$TREE/.tide-prepared"
fi

export GOPATH="$WORK/gopath" GO111MODULE=off CGO_ENABLED=0 GOFLAGS=
export GOCACHE="$CACHE/go-build"
cd "$TREE"
mkdir -p "$BIN"
for c in "${missing[@]}"; do
  # -v: the package being compiled is the log's last line, which the heartbeat shows.
  logged "building $c v$KUBE_VERSION (first build takes minutes on 2 cores)" \
    go build -v -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=20" -o "$BIN/$c.tmp" "./cmd/$c"
  mv "$BIN/$c.tmp" "$BIN/$c"
done
# Keep the binaries; the source tree and build cache are only needed to build.
rm -rf "$WORK" "$GOCACHE"
echo "[$(elapsed_s)] kubernetes v$KUBE_VERSION binaries built in $BIN"
