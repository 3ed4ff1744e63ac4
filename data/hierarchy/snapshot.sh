#!/usr/bin/env bash
# Rebuilds data/hierarchy/default.snap.zst, the hierarchy embedded in micra, from
#   - the IANA IPv4 address-space and IPv6 unicast-assignment registries (committed here),
#   - the AFRINIC and LACNIC extended delegation statistics (committed here, gzipped),
#   - the range CSVs of the npm package @ip-location-db/asn (fetched with npm, never committed),
#   - the country-range CSVs of the npm package @ip-location-db/geo-whois-asn-country (registry
#     WHOIS + geofeed country per range; fetched with npm, never committed): every node without a
#     registry country of its own takes the country covering more than half of its range.
# Usage: data/hierarchy/snapshot.sh   (or `make snapshot`)
set -euo pipefail
cd "$(dirname "$0")/../.."
ASN_VERSION=2.3.2026061719
ASN_SHA256=b9425daf2f011c28f8586685d4f89166e77627e2c15fd93c6262c3e2dead6153
CC_VERSION=2.3.2026061719
CC_SHA256=2a3e609015884c93c2d398e777ce1d2d34cab026054c43559bff32b25669f606
command -v npm >/dev/null || { echo "snapshot: npm is required (apt-get install npm)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "@ip-location-db/asn@${ASN_VERSION}" >/dev/null)
tgz="$tmp/ip-location-db-asn-${ASN_VERSION}.tgz"
echo "${ASN_SHA256}  ${tgz}" | sha256sum -c --quiet -
tar -xzf "$tgz" -C "$tmp" package/asn-ipv4.csv package/asn-ipv6.csv
mkdir "$tmp/cc"
(cd "$tmp/cc" && npm pack --silent "@ip-location-db/geo-whois-asn-country@${CC_VERSION}" >/dev/null)
cctgz="$tmp/cc/ip-location-db-geo-whois-asn-country-${CC_VERSION}.tgz"
echo "${CC_SHA256}  ${cctgz}" | sha256sum -c --quiet -
tar -xzf "$cctgz" -C "$tmp/cc" package/geo-whois-asn-country-ipv4.csv package/geo-whois-asn-country-ipv6.csv
D=data/hierarchy
go run -tags nodefaultsnapshot ./cmd/micra hierarchy build \
  --iana "$D/iana-ipv4-address-space.csv" \
  --iana "$D/iana-ipv6-unicast-address-assignments.csv" \
  --rir "$D/delegated-afrinic-extended-20230323.gz" \
  --rir "$D/delegated-lacnic-extended-20230323.gz" \
  --ranges "$tmp/package/asn-ipv4.csv" \
  --ranges "$tmp/package/asn-ipv6.csv" \
  --countries "$tmp/cc/package/geo-whois-asn-country-ipv4.csv" \
  --countries "$tmp/cc/package/geo-whois-asn-country-ipv6.csv" \
  --zstd -o "$D/default.snap.zst"
