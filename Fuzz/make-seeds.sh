#!/usr/bin/env bash
# Regenerates the seed corpora in Fuzz/Corpus (committed; run this only to change them):
#   inflate/   small gzip, zlib and raw deflate streams made by the real gzip and pigz
#              (named and unnamed members, concatenated members, zero padding, stored blocks,
#              pigz's independent blocks) and zstd frames, each behind the seed byte that picks
#              auto-detection;
#   parsers/   chunk sizes and rates as a user types them, a key file line, a pairing code,
#              partial files' range lists;
#   frames/, receiver/, sender/
#              valid transfer sessions, both ways, encoded with the protocol's own encoder
#              (MakeSeeds);
#   tls/       what reaches a receiver over TLS: nothing, plaintext, an HTTP request, real
#              ClientHellos (whole, cut, with a wrong key, followed by records), a TLS 1.2
#              ClientHello; and a real client's sessions with the key, with a wrong one, and
#              with its stream edited (MakeSeeds, with the target's keys).
set -euo pipefail
cd "$(dirname "$0")"
fuzz=$PWD
corpus=$fuzz/Corpus
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p .build/root
ln -sfn "$(cd .. && pwd)" .build/root/sluice
export SLUICE_ROOT=$fuzz/.build/root/sluice
swift build -c release --scratch-path .build/seeds -Xswiftc -enable-testing --product MakeSeeds >/dev/null
seeds=$fuzz/.build/seeds/release/MakeSeeds

rm -rf "$corpus"
"$seeds" sessions "$corpus"
"$seeds" tls "$corpus/tls"

# Inputs for the compressed streams: text, and bytes that do not compress (stored blocks).
raw=$work/raw
mkdir -p "$raw"
for i in $(seq 1 60); do echo "line $i: the quick brown fox jumps over the lazy dog"; done >"$work/text"
LC_ALL=C awk 'BEGIN { x = 12345; for (i = 0; i < 1500; i++) {
    x = (x * 1103515245 + 12345) % 2147483648; printf "%c", int(x / 65536) % 256 } }' >"$work/noise" </dev/null
printf 'hello\n' >"$work/hello"
: >"$work/empty"

gzip -n -c "$work/hello" >"$raw/hello.gz"
(cd "$work" && gzip -c text) >"$raw/named.gz"              # FNAME and MTIME set
gzip -n -9 -c "$work/text" >"$raw/text9.gz"
gzip -n -1 -c "$work/noise" >"$raw/stored.gz"
gzip -n -c "$work/empty" >"$raw/empty.gz"
cat "$raw/hello.gz" "$raw/text9.gz" >"$raw/members.gz"
cat "$raw/hello.gz" >"$raw/padded.gz" && head -c 512 /dev/zero >>"$raw/padded.gz"
cat "$raw/hello.gz" >"$raw/garbage.gz" && printf 'junk' >>"$raw/garbage.gz"
pigz -n -c -p 2 -b 32 "$work/text" >"$raw/pigz-blocks.gz"
pigz -n -c -i -b 32 "$work/text" >"$raw/pigz-independent.gz"
pigz -z -c "$work/text" >"$raw/text.zz"
pigz -z -c "$work/empty" >"$raw/empty.zz"
# zstd (Decompressor's detection): a frame, two frames, an empty frame.
if command -v zstd >/dev/null; then
    zstd -q -c "$work/text" >"$raw/text.zst"
    cat "$raw/text.zst" >"$raw/frames.zst" && zstd -q -c "$work/hello" >>"$raw/frames.zst"
    zstd -q -c "$work/empty" >"$raw/empty.zst"
fi
# Raw deflate: a gzip member without its 10-byte header and 8-byte trailer.
gzip -n -c "$work/text" | tail -c +11 | head -c -8 >"$raw/text.deflate"
gzip -n -c "$work/noise" | tail -c +11 | head -c -8 >"$raw/noise.deflate"

"$seeds" inflate "$corpus/inflate" "$raw"/*

# Sizes as --chunk-size and --rate-limit take them (the first byte is the unused seed byte).
mkdir -p "$corpus/parsers"
for size in 512 64K 64KiB 1M 4MiB 10m 2G 4194305 999999999999G 0x10; do
    printf '\0%s' "$size" >"$corpus/parsers/$size"
done
# A key file's line, a pairing code as typed, and partial files' range lists (the seed byte
# picks the file's size: 0x30 is 48 << 0, 0xff is 255 << 15).
printf '\0sluice-key-v1 %s\n' 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f >"$corpus/parsers/key"
printf '\0%s' '7kq2-m4zp-abcd-efgh-o123-4567-899t' >"$corpus/parsers/code"
printf '\x30%s' '0+16=16,16+16=3,32+16=0' >"$corpus/parsers/ranges"
printf '\xff%s' '0+1048576=524288,1048576+1048576=1048576,99+5=1,18446744073709551615+2=1' >"$corpus/parsers/ranges-large"
# Range lists at the edges of an offset (the seed byte 0xfc, 0xfd, 0xfe picks a file of 2^63 - 1,
# 2^63 or 2^64 - 1 bytes), and sizes past what a size holds.
printf '\xfc%s' '9223372036854775806+1=1,0+9223372036854775807=5' >"$corpus/parsers/ranges-edge-offset"
printf '\xfd%s' '9223372036854775807+1=1,9223372036854775808+0=0' >"$corpus/parsers/ranges-edge-past"
printf '\xfe%s' '18446744073709551614+1=1,9223372036854775808+9223372036854775807=3' >"$corpus/parsers/ranges-edge-max"
printf '\0%s' '18446744073709551615' >"$corpus/parsers/size-edge-max"
printf '\0%s' '9223372036854775808G' >"$corpus/parsers/size-edge-units"
# The three relay hellos (`RelayHello.parse`), one with a byte past its newline.
printf '\0%s\n' 'SLUICE-RELAY 1 OPEN' >"$corpus/parsers/relay-open"
printf '\0%s\nx' 'SLUICE-RELAY 1 JOIN 4711' >"$corpus/parsers/relay-join"
printf '\0%s\n' "SLUICE-RELAY 1 STREAM $(printf '0123456789abcdef%.0s' 1 2 3 4)" >"$corpus/parsers/relay-stream"
for dir in "$corpus"/*; do echo "make-seeds: $(ls "$dir" | wc -l) seeds in ${dir#"$fuzz"/}"; done
