#!/usr/bin/env bash
# Publishes the ratekit copier template as a release of its own git repository.
#
# copier reads copier.yml at the root of a git repository and takes template
# versions from that repository's tags ("1 template = 1 git repository"), so the
# template in ratekit's copier-template/ directory is published to a dedicated
# repository: this script makes the repository's tree equal to the template
# directory, commits it and tags the commit vVERSION. Push it afterwards:
#
#   copier-template/publish.sh ../ratekit-template 2.0.0
#   git -C ../ratekit-template push --follow-tags origin main
#
# Services then run `copier copy --trust <that repository> my-service` and later
# `copier update --trust`. The tests publish to a temporary repository with this
# same script (see copiertest/).
#
# Usage: publish.sh [--source DIR] [--ratekit-path DIR | --ratekit-version V] REPO VERSION
#   --source DIR           publish DIR instead of this script's directory
#   --ratekit-path DIR     services default to building against the ratekit
#                          checkout DIR (go.mod replace lines); the default is
#                          the checkout this script belongs to, so a template
#                          published from a checkout renders services that
#                          build on this machine before ratekit is released
#   --ratekit-version V    services default to the released ratekit V (vX.Y.Z)
#                          from the Go module proxy instead
#   REPO          the template repository (created when missing; must be clean)
#   VERSION       PEP 440 release number such as 2.0.0 (tagged v2.0.0)
set -euo pipefail

usage() { echo "usage: $0 [--source DIR] [--ratekit-path DIR | --ratekit-version V] REPO VERSION" >&2; exit 2; }
die() { echo "publish.sh: $*" >&2; exit 1; }

here=$(cd "$(dirname "$0")" && pwd)
src=$here
ratekit_path=
ratekit_version=
while [ $# -gt 0 ]; do
  case $1 in
    --source) [ $# -ge 2 ] || usage; src=$(cd "$2" && pwd); shift 2 ;;
    --ratekit-path) [ $# -ge 2 ] || usage; ratekit_path=$(cd "$2" && pwd) || die "no directory $2"; shift 2 ;;
    --ratekit-version) [ $# -ge 2 ] || usage; ratekit_version=$2; shift 2 ;;
    --*) usage ;;
    *) break ;;
  esac
done
[ $# -eq 2 ] || usage
[ -z "$ratekit_path" ] || [ -z "$ratekit_version" ] || die "give --ratekit-path or --ratekit-version, not both"
if [ -n "$ratekit_version" ]; then
  [[ $ratekit_version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || die "ratekit version $ratekit_version is not a semantic version such as v0.1.0"
elif [ -z "$ratekit_path" ]; then
  ratekit_path=$(dirname "$here")
fi
if [ -n "$ratekit_path" ] && ! grep -qx 'module github.com/ratekit/ratekit' "$ratekit_path/go.mod" 2>/dev/null; then
  die "$ratekit_path is not a ratekit checkout (no go.mod of module github.com/ratekit/ratekit)"
fi
repo=$1
version=${2#v}
[[ $version =~ ^[0-9]+(\.[0-9]+)*$ ]] || die "version $2 is not a release number such as 2.0.0"
tag=v$version
[ -f "$src/copier.yml" ] || die "$src has no copier.yml"

git_() { git -C "$repo" -c user.name="${GIT_AUTHOR_NAME:-ratekit template publisher}" \
  -c user.email="${GIT_AUTHOR_EMAIL:-ratekit-template@localhost}" -c commit.gpgsign=false -c tag.gpgsign=false "$@"; }

if [ ! -d "$repo/.git" ]; then
  # Never empty a directory that is not already a template repository.
  if [ -d "$repo" ] && [ -n "$(ls -A "$repo")" ]; then die "$repo exists, is not empty and is not a git repository"; fi
  mkdir -p "$repo"
  git init -q -b main "$repo"
elif git -C "$repo" rev-parse -q --verify HEAD >/dev/null && [ ! -f "$repo/copier.yml" ]; then
  die "$repo is a git repository without copier.yml: not a template repository"
fi
[ -z "$(git -C "$repo" status --porcelain)" ] || die "$repo has uncommitted changes"
if git -C "$repo" rev-parse -q --verify "refs/tags/$tag" >/dev/null; then
  die "$repo already has tag $tag"
fi

# Make the tree equal to the template: drop everything but .git, then copy.
find "$repo" -mindepth 1 -maxdepth 1 ! -name .git -exec rm -rf {} +
tar -C "$src" --exclude=./.git -cf - . | tar -C "$repo" -xf -
# The defaults of the questions ratekit_path and ratekit_version (published.yml,
# included by copier.yml).
cat >"$repo/published.yml" <<EOF
# Written by publish.sh: the defaults of the questions ratekit_path and
# ratekit_version for this release of the template.
published_ratekit_path:
  type: str
  default: "$ratekit_path"
  when: false
published_ratekit_version:
  type: str
  default: "${ratekit_version:-v0.1.0}"
  when: false
template_published:
  type: bool
  default: true
  when: false
EOF
git_ add -A
git_ commit -q --allow-empty -m "ratekit service template $tag"
git_ tag -a "$tag" -m "ratekit service template $tag"
echo "published $src as $tag in $repo (services default to ${ratekit_version:-the ratekit checkout $ratekit_path})"
