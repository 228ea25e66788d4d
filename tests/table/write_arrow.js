// Writes the Arrow IPC files tests/arrow_dataset_test.cpp reads, with an independent writer:
// apache-arrow (npm) builds the tables and writes them in the stream format (as Hugging Face
// `datasets` caches them) and the file format, in record batches of 100 rows.
// Usage: node write_arrow.js OUT_DIR [IMAGES_DIR]. Row r of every table holds the values the test
// computes from r (see expected_* in the test), so the two must change together.
//
// Compressed bodies: apache-arrow writes them through codecs registered with it, and has none of
// its own; the ones below are written here. LZ4_FRAME: LZ4 frames of real LZ4 blocks (a greedy
// compressor); ZSTD: zstd frames of raw and RLE blocks. apache-arrow 21 prefixes each compressed
// buffer with its *compressed* length where the format asks for the uncompressed one (its own
// reader ignores the prefix); fix_prefixes() writes the uncompressed length, read from the
// frame's content-size field, so that the files are what the format (and pyarrow) reads.
"use strict";
const fs = require("fs");
const path = require("path");
const arrow = require("apache-arrow");

const out = process.argv[2];
const images = process.argv[3];
if (!out) {
  console.error("usage: node write_arrow.js OUT_DIR [IMAGES_DIR]");
  process.exit(2);
}
fs.mkdirSync(out, { recursive: true });

const N = 250;
const fruit = ["pear", "apple", "fig", "banana", "kiwi"];
const cat = (r) => fruit[(r * 3) % 5];
const bytes = (r) => Uint8Array.from([...Array(r % 6).keys()].map((k) => (r * 31 + k * 7) % 256));
const range = (n) => [...Array(n).keys()];
const A = arrow;
const fld = (name, type) => new A.Field(name, type, true);

function table(first, count) {
  const rs = range(count).map((k) => first + k);
  const v = (type, f) => A.vectorFromArray(rs.map(f), type);
  return new A.Table({
    b: v(new A.Bool(), (r) => r % 3 === 0),
    i8: v(new A.Int8(), (r) => ((r * 37) % 256) - 128),
    i16: v(new A.Int16(), (r) => r * 100 - 20000),
    i32: v(new A.Int32(), (r) => r * 100000 - 2000000000),
    i64: v(new A.Int64(), (r) => BigInt(r) * 123456789012n - 3000000000000n),
    u8: v(new A.Uint8(), (r) => (r * 11) % 256),
    u16: v(new A.Uint16(), (r) => 65535 - r * 7),
    u32: v(new A.Uint32(), (r) => 4294967295 - r * 1000),
    u64: v(new A.Uint64(), (r) => 18446744073709551615n - BigInt(r) * 3n),
    f16: v(new A.Float16(), (r) => r * 0.25 - 8),
    f32: v(new A.Float32(), (r) => r * 0.5 - 3),
    f64: v(new A.Float64(), (r) => r * 0.25 + 1e10),
    fsl: v(new A.FixedSizeList(3, fld("item", new A.Float32())), (r) => [r, r + 0.5, -r]),
    fsl2: v(new A.FixedSizeList(2, fld("item", new A.FixedSizeList(2, fld("item", new A.Int16())))),
            (r) => [[r, r + 1], [r + 2, -r]]),
    lst: v(new A.List(fld("item", new A.Int32())), (r) => range(r % 4).map((k) => r * 10 + k)),
    llst: v(new A.LargeList(fld("item", new A.Int64())),
            (r) => range(r % 3).map((k) => BigInt(r) * 1000n + BigInt(k))),
    lfsl: v(new A.List(fld("item", new A.FixedSizeList(2, fld("item", new A.Float64())))),
            (r) => range(r % 3).map((k) => [r + k, -(r + k)])),
    lb: v(new A.List(fld("item", new A.Bool())), (r) => range(r % 5).map((k) => (r + k) % 2 === 0)),
    s: v(new A.Utf8(), cat),
    ls: v(new A.LargeUtf8(), (r) => cat(r) + r),
    bin: v(new A.Binary(), bytes),
    lbin: v(new A.LargeBinary(), bytes),
    d: v(new A.Dictionary(new A.Utf8(), new A.Int32()), cat),
    d8: v(new A.Dictionary(new A.Utf8(), new A.Int8()), (r) => fruit[r % 3]),
    nf: v(new A.Float64(), (r) => (r % 4 === 1 ? null : r * 1.5)),
    nf32: v(new A.Float32(), (r) => (r % 4 === 1 ? null : r * 0.5)),
    nf16: v(new A.Float16(), (r) => (r % 4 === 1 ? null : r * 0.5)),
    ni: v(new A.Int32(), (r) => (r % 6 === 3 ? null : r)),
    ns: v(new A.Utf8(), (r) => (r % 7 === 2 ? null : cat(r))),
    nd: v(new A.Dictionary(new A.Utf8(), new A.Int32()), (r) => (r % 7 === 2 ? null : cat(r))),
    ts: v(new A.TimestampMillisecond(), (r) => r * 1000),
    ln: v(new A.List(fld("item", new A.Int32())), (r) => (r % 5 === 3 ? [r, null] : [r])),
  });
}

/// `t` cut into record batches of `rows` (the slices share each dictionary).
function batches(t, rows) {
  const parts = [];
  for (let i = 0; i < t.numRows; i += rows) parts.push(...t.slice(i, i + rows).batches);
  return new A.Table(parts);
}

// ---- codecs
const P1 = 2654435761, P2 = 2246822519, P3 = 3266489917, P4 = 668265263, P5 = 374761393;
const rotl = (x, r) => ((x << r) | (x >>> (32 - r))) >>> 0;
function xxh32(buf) {
  const u32 = (p) => (buf[p] | (buf[p + 1] << 8) | (buf[p + 2] << 16) | (buf[p + 3] << 24)) >>> 0;
  let i = 0;
  let h;
  const n = buf.length;
  if (n >= 16) {
    const round = (v, x) => Math.imul(rotl((v + Math.imul(x, P2)) >>> 0, 13), P1) >>> 0;
    let v1 = (P1 + P2) >>> 0, v2 = P2, v3 = 0, v4 = (0 - P1) >>> 0;
    for (; i <= n - 16; i += 16) {
      v1 = round(v1, u32(i)); v2 = round(v2, u32(i + 4));
      v3 = round(v3, u32(i + 8)); v4 = round(v4, u32(i + 12));
    }
    h = (rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18)) >>> 0;
  } else {
    h = P5;
  }
  h = (h + n) >>> 0;
  for (; i <= n - 4; i += 4) h = Math.imul(rotl((h + Math.imul(u32(i), P3)) >>> 0, 17), P4) >>> 0;
  for (; i < n; ++i) h = Math.imul(rotl((h + Math.imul(buf[i], P5)) >>> 0, 11), P1) >>> 0;
  h ^= h >>> 15; h = Math.imul(h, P2) >>> 0; h ^= h >>> 13; h = Math.imul(h, P3) >>> 0;
  return (h ^ (h >>> 16)) >>> 0;
}
function u64le(n) {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigUint64(0, BigInt(n), true);
  return [...b];
}
function lz4Block(src) {
  const n = src.length, o = [];
  const seen = new Map();
  const len = (l) => { for (; l >= 255; l -= 255) o.push(255); o.push(l); };
  let anchor = 0;
  for (let i = 0; i < n - 12;) {
    const key = src[i] | (src[i + 1] << 8) | (src[i + 2] << 16) | (src[i + 3] << 24);
    const c = seen.get(key);
    seen.set(key, i);
    if (c === undefined || i - c > 65535) { ++i; continue; }
    let m = 4;
    while (i + m < n - 5 && src[c + m] === src[i + m]) ++m;
    const lit = i - anchor;
    o.push((Math.min(lit, 15) << 4) | Math.min(m - 4, 15));
    if (lit >= 15) len(lit - 15);
    for (let k = anchor; k < i; ++k) o.push(src[k]);
    o.push((i - c) & 255, (i - c) >> 8);
    if (m - 4 >= 15) len(m - 4 - 15);
    i += m;
    anchor = i;
  }
  const lit = n - anchor;
  o.push(Math.min(lit, 15) << 4);
  if (lit >= 15) len(lit - 15);
  for (let k = anchor; k < n; ++k) o.push(src[k]);
  return o;
}
function lz4Frame(src) {
  const desc = [0x68, 0x70, ...u64le(src.length)];  // v1, independent blocks, content size
  const o = [0x04, 0x22, 0x4d, 0x18, ...desc, (xxh32(Uint8Array.from(desc)) >>> 8) & 255];
  for (let at = 0; at < src.length; at += 1 << 22) {
    const block = lz4Block(src.subarray(at, at + (1 << 22)));
    o.push(block.length & 255, (block.length >> 8) & 255, (block.length >> 16) & 255, block.length >>> 24);
    for (const x of block) o.push(x);
  }
  o.push(0, 0, 0, 0);
  return Uint8Array.from(o);
}
function zstdFrame(src) {
  const o = [0x28, 0xb5, 0x2f, 0xfd, 0xe0, ...u64le(src.length)];  // single segment, 8-byte size
  const blocks = [];
  for (let i = 0; i < src.length;) {
    let run = 1;
    while (i + run < src.length && src[i + run] === src[i] && run < 1 << 17) ++run;
    if (run >= 8) {
      blocks.push([1, run, [src[i]]]);
      i += run;
      continue;
    }
    const last = blocks[blocks.length - 1];
    if (last && last[0] === 0 && last[1] + run <= 1 << 17) {
      for (let k = 0; k < run; ++k) last[2].push(src[i + k]);
      last[1] += run;
    } else {
      blocks.push([0, run, [...src.subarray(i, i + run)]]);
    }
    i += run;
  }
  if (blocks.length === 0) blocks.push([0, 0, []]);
  blocks.forEach(([type, size, data], k) => {
    const h = (k === blocks.length - 1 ? 1 : 0) | (type << 1) | (size << 3);
    o.push(h & 255, (h >> 8) & 255, (h >> 16) & 255);
    for (const x of data) o.push(x);  // one at a time: a block of 128 KiB overflows a spread
  });
  return Uint8Array.from(o);
}
A.compressionRegistry.set(A.CompressionType.LZ4_FRAME, { encode: lz4Frame });
A.compressionRegistry.set(A.CompressionType.ZSTD, { encode: zstdFrame });

/// Each compressed buffer's prefix made its uncompressed length (the frame's content size).
function fix_prefixes(buf, start) {
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  let fixed = 0;
  for (let at = start; at + 8 <= buf.length;) {
    const len = view.getInt32(at + 4, true);
    if (view.getUint32(at, true) !== 0xffffffff || len === 0) break;
    const m = A.Message.decode(buf.subarray(at + 8, at + 8 + len));
    const body = at + 8 + len;
    const header = m.header();
    const rb = m.isDictionaryBatch() ? header.data : m.isRecordBatch() ? header : null;
    if (rb && rb.compression) {
      for (const region of rb.buffers) {
        const off = body + Number(region.offset);
        if (Number(region.length) === 0 || view.getBigInt64(off, true) === -1n) continue;
        const frame = off + 8;
        const size = view.getBigUint64(frame + (buf[frame] === 0x04 ? 6 : 5), true);
        view.setBigInt64(off, size, true);
        ++fixed;
      }
    }
    at = body + Number(m.bodyLength);
  }
  return fixed;
}

function write(name, t, format = "stream", compression = null) {
  const W = format === "stream" ? A.RecordBatchStreamWriter : A.RecordBatchFileWriter;
  const w = new W(compression === null ? {} : { compressionType: compression });
  w.writeAll(t);
  const buf = w.toUint8Array(true);
  if (compression !== null && fix_prefixes(buf, format === "stream" ? 0 : 8) === 0) {
    throw new Error(`${name}: no buffer was compressed`);
  }
  fs.writeFileSync(path.join(out, name), buf);
}

const all = batches(table(0, N), 100);
write("all.arrow", all);
// The same rows in record batches of 2: a stream of 125 small messages (a URL's open reads
// several of them a GET).
write("small_batches.arrow", batches(table(0, N), 2));
write("all_file.arrow", all, "file");
write("all_lz4.arrow", all, "stream", A.CompressionType.LZ4_FRAME);
write("all_zstd.arrow", all, "stream", A.CompressionType.ZSTD);
write("all_file_lz4.arrow", all, "file", A.CompressionType.LZ4_FRAME);
// One ZSTD batch of 40,000 float64 values in column "x", r * 1.5 + 0.1 at odd rows and 0 at even
// ones: a frame of about 300 KB (raw blocks between RLE ones), whose length prefix the tests
// forge.
{
  const rs = [...Array(40000).keys()];
  const x = rs.map((r) => (r % 2 === 0 ? 0 : r * 1.5 + 0.1));
  const big = new A.Table({ x: A.vectorFromArray(x, new A.Float64()) });
  write("big_zstd.arrow", big, "stream", A.CompressionType.ZSTD);
}
// One utf8 column "t" of 8 bytes ("ab", "cd", "efgh"), whose last offset the tests forge.
write("one_text.arrow", new A.Table({ t: A.vectorFromArray(["ab", "cd", "efgh"], new A.Utf8()) }));
// One fixed_size_list<int64>[4951] column "v" of 2 rows (row r: r * 100000 + 2k, all even, so that
// the list size's bytes, 57 13 00 00, occur in the schema alone), whose list size the tests forge.
write("one_fsl.arrow", new A.Table({
  v: A.vectorFromArray([0, 1].map((r) => range(4951).map((k) => BigInt(r * 100000 + 2 * k))),
                       new A.FixedSizeList(4951, fld("item", new A.Int64()))),
}));
// Files whose schemas differ: schema_ab.arrow has schema_a.arrow's column and one more.
{
  const x = A.vectorFromArray([1, 2, 3], new A.Int32());
  write("schema_a.arrow", new A.Table({ x }));
  write("schema_ab.arrow", new A.Table({ x, y: A.vectorFromArray([0.5, 1, 1.5], new A.Float64()) }));
}
// The same rows in three files (120 + 100 + 30 rows).
for (const [name, first, count] of [["part0", 0, 120], ["part1", 120, 100], ["part2", 220, 30]]) {
  write(`${name}.arrow`, batches(table(first, count), 100));
}
// Batches of their own dictionaries: the stream replaces the dictionary before each.
{
  const parts = [0, 100, 200].flatMap((f) => table(f, f === 200 ? 50 : 100).batches);
  const schema = parts[0].schema;
  write("dict_replaced.arrow", new A.Table(schema, parts.map((b) => new A.RecordBatch(schema, b.data))));
}
// A dictionary that grows: the second batch's dictionary adds to the first's, which the writer
// sends as a delta. Rows: pear apple pear fig kiwi apple.
{
  const type = new A.Dictionary(new A.Utf8(), new A.Int32(), 77);
  const d1 = A.vectorFromArray(["pear", "apple"], new A.Utf8()).data[0];
  const d2 = A.vectorFromArray(["fig", "kiwi"], new A.Utf8()).data[0];
  const schema = new A.Schema([new A.Field("dd", type, true)]);
  const batch = (idx, chunks) => new A.RecordBatch(schema, A.makeData({
    type: new A.Struct(schema.fields), length: idx.length, nullCount: 0,
    children: [A.makeData({ type, length: idx.length, nullCount: 0, data: Int32Array.from(idx),
                            dictionary: new A.Vector(chunks) })] }));
  const t = new A.Table(schema, [batch([0, 1, 0], [d1]), batch([2, 3, 1], [d1, d2])]);
  write("dict_delta.arrow", t);
  write("dict_delta_file.arrow", t, "file");
}
// Nested types, 60 rows in record batches of 25 (nested.arrow, stream format; nested_file.arrow,
// file format, LZ4-compressed). Hugging Face `datasets` stores Array2D/Array3D features as an
// extension type: list<list<T>> storage, the field's metadata holding ARROW:extension:name and
// ARROW:extension:metadata (JSON [shape, dtype], shape[0] null when the first dimension varies).
//   a2: Array2D (2, 3) float32, row r [[r, r+1, r+2], [-r, -r-1, -r-2]]; null at r % 11 == 4.
//   a3: Array3D (null, 2, 2) int32, r % 3 blocks, block k [[r, k], [r+k, -r]].
//   a2bad: Array2D (2, 2) int16 [[r, r], [r, r]], but row 5 is [[5, 5]] and row 7 [[7, 7], [7]].
//   nfsl: fixed_size_list<float32>[2] [r, r/2]: null at r % 5 == 1, [r, null] at r % 5 == 3.
//   nfsli: fixed_size_list<int32>[2] [r, -r]: null at r % 5 == 1, [null, -r] at r % 5 == 3.
//   ll: list<list<int32>> without extension metadata; ls2: list<utf8>.
{
  const NR = 60;
  const rs = range(NR);
  const ext = (name, shape, dtype) => new Map([
    ["ARROW:extension:name", `datasets.features.features.${name}`],
    ["ARROW:extension:metadata", JSON.stringify([shape, dtype])],
  ]);
  const list2 = (t) => new A.List(fld("item", new A.List(fld("item", t))));
  const list3 = (t) => new A.List(fld("item", list2(t)));
  const fields = [
    new A.Field("a2", list2(new A.Float32()), true, ext("Array2DExtensionType", [2, 3], "float32")),
    new A.Field("a3", list3(new A.Int32()), true, ext("Array3DExtensionType", [null, 2, 2], "int32")),
    new A.Field("a2bad", list2(new A.Int16()), true, ext("Array2DExtensionType", [2, 2], "int16")),
    fld("nfsl", new A.FixedSizeList(2, fld("item", new A.Float32()))),
    fld("nfsli", new A.FixedSizeList(2, fld("item", new A.Int32()))),
    fld("ll", list2(new A.Int32())),
    fld("ls2", new A.List(fld("item", new A.Utf8()))),
  ];
  const values = {
    a2: (r) => (r % 11 === 4 ? null : [[r, r + 1, r + 2], [-r, -r - 1, -r - 2]]),
    a3: (r) => range(r % 3).map((k) => [[r, k], [r + k, -r]]),
    a2bad: (r) => (r === 5 ? [[5, 5]] : r === 7 ? [[7, 7], [7]] : [[r, r], [r, r]]),
    nfsl: (r) => (r % 5 === 1 ? null : r % 5 === 3 ? [r, null] : [r, r / 2]),
    nfsli: (r) => (r % 5 === 1 ? null : r % 5 === 3 ? [null, -r] : [r, -r]),
    ll: (r) => [[r], [r, r]],
    ls2: (r) => [`x${r}`],
  };
  const schema = new A.Schema(fields);
  const columns = fields.map((f) => A.vectorFromArray(rs.map(values[f.name]), f.type));
  const data = A.makeData({ type: new A.Struct(fields), length: NR, nullCount: 0,
                            children: columns.map((v) => v.data[0]) });
  const t = new A.Table(schema, [new A.RecordBatch(schema, data)]);
  const parts = [];
  for (let i = 0; i < NR; i += 25) parts.push(...t.slice(i, i + 25).batches);
  const nested = new A.Table(schema, parts.map((b) => new A.RecordBatch(schema, b.data)));
  write("nested.arrow", nested);
  write("nested_file.arrow", nested, "file", A.CompressionType.LZ4_FRAME);
}
// A wide table for reads by ranges (as write_tables.js's wide.parquet): 48 float64 columns
// c00..c47, an int64 "label" and a utf8 "text", 2000 rows in record batches of 500; in the file
// format, the stream format, and the stream format LZ4-compressed. wide_arrow.txt lists, per
// file and record batch: "<file> <message's first byte> <body's first byte>", then per column
// "<name> <first byte> <end>" of its buffers that hold bytes (absolute places in the file), and
// "text.offsets <first byte> <end>" of the text column's offsets buffer.
{
  const WIDE = 2000;
  const wr = range(WIDE);
  const cols = {};
  for (let k = 0; k < 48; ++k) {
    cols[`c${String(k).padStart(2, "0")}`] = A.vectorFromArray(wr.map((r) => r * 50 + k + 0.5), new A.Float64());
  }
  cols.label = A.vectorFromArray(wr.map((r) => BigInt(r % 10)), new A.Int64());
  cols.text = A.vectorFromArray(wr.map((r) => `row ${r} ` + "x".repeat(r % 13)), new A.Utf8());
  const t = batches(new A.Table(cols), 500);
  const names = Object.keys(cols);
  const counts = names.map((n) => (n === "text" ? 3 : 2));  // buffers per column
  const lines = [];
  for (const [name, format, compression] of [["wide_file.arrow", "file", null],
                                             ["wide.arrow", "stream", null],
                                             ["wide_lz4.arrow", "stream", A.CompressionType.LZ4_FRAME]]) {
    write(name, t, format, compression);
    const buf = fs.readFileSync(path.join(out, name));
    const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
    for (let at = format === "file" ? 8 : 0; at + 8 <= buf.length;) {
      const len = view.getInt32(at + 4, true);
      if (view.getUint32(at, true) !== 0xffffffff || len === 0) break;
      const m = A.Message.decode(buf.subarray(at + 8, at + 8 + len));
      const body = at + 8 + len;
      if (m.isRecordBatch()) {
        const regions = m.header().buffers;
        let line = `${name} ${at} ${body}`;
        let b = 0;
        names.forEach((n, c) => {
          let first = Infinity, end = 0;
          for (let k = b; k < b + counts[c]; ++k) {
            const o = body + Number(regions[k].offset), l = Number(regions[k].length);
            if (l > 0) { first = Math.min(first, o); end = Math.max(end, o + l); }
          }
          line += ` ${n} ${first} ${end}`;
          if (n === "text") {  // its offsets alone: what open() reads for its lengths
            const o = body + Number(regions[b + 1].offset);
            line += ` text.offsets ${o} ${o + Number(regions[b + 1].length)}`;
          }
          b += counts[c];
        });
        lines.push(line);
      }
      at = body + Number(m.bodyLength);
    }
  }
  fs.writeFileSync(path.join(out, "wide_arrow.txt"), lines.join("\n") + "\n");
}
// A numeric table for throughput: 1,000,000 rows in batches of 10,000.
{
  const n = 1000000;
  const x = new Float32Array(n * 4);
  for (let i = 0; i < x.length; ++i) x[i] = i * 0.25;
  const y = new BigInt64Array(n);
  for (let i = 0; i < n; ++i) y[i] = BigInt(i);
  const t = new A.Table({
    x: A.makeVector({ type: new A.FixedSizeList(4, fld("item", new A.Float32())), length: n,
                      nullCount: 0, child: A.makeData({ type: new A.Float32(), data: x }) }),
    y: A.makeVector(y),
  });
  if (process.env.FERRY_ARROW_BIG) {
    write("numeric.arrow", batches(t, 10000));
    write("numeric_lz4.arrow", batches(t, 10000), "stream", A.CompressionType.LZ4_FRAME);
  }
}
// An HF-style image table: struct{bytes, path} (path null for every third), the same images as
// plain binary, and a label; the images are IMAGES_DIR's files in sorted order.
if (images) {
  const files = fs.readdirSync(images).sort();
  const data = files.map((f) => new Uint8Array(fs.readFileSync(path.join(images, f))));
  const image = new A.Struct([fld("bytes", new A.Binary()), fld("path", new A.Utf8())]);
  const t = new A.Table({
    image: A.vectorFromArray(files.map((f, i) => ({ bytes: data[i], path: i % 3 === 0 ? null : f })), image),
    raw: A.vectorFromArray(data, new A.Binary()),
    label: A.vectorFromArray(files.map((f, i) => BigInt(i % 7)), new A.Int64()),
  });
  write("images.arrow", batches(t, 100));
  // The same with Hugging Face's features in the schema's metadata, as `datasets` writes them:
  // `image` an Image, `raw` a Value("binary").
  const features = { image: { _type: "Image" }, raw: { dtype: "binary", _type: "Value" },
                     label: { dtype: "int64", _type: "Value" } };
  const hf = new A.Table(
    new A.Schema(t.schema.fields, new Map([["huggingface", JSON.stringify({ info: { features } })]])),
    t.batches);
  write("images_hf.arrow", hf);
}
// The fuzz target's seeds (fuzz/corpus/arrow/, written once with FERRY_ARROW_SEEDS=DIR): a table
// of 5 rows in batches of 2, each file behind the fuzz target's options byte.
if (process.env.FERRY_ARROW_SEEDS) {
  const rs = range(5);
  const v = (t, f) => A.vectorFromArray(rs.map(f), t);
  const t = new A.Table({
    i: v(new A.Int32(), (r) => (r % 2 ? null : r)),
    b: v(new A.Bool(), (r) => r % 2 === 0),
    h: v(new A.Float16(), (r) => r / 2),
    s: v(new A.Utf8(), (r) => ["a", "bc", null, "d", "a"][r]),
    d: v(new A.Dictionary(new A.Utf8(), new A.Int8()), (r) => ["x", "y"][r % 2]),
    l: v(new A.List(fld("item", new A.Int16())), (r) => [r, r + 1].slice(0, r % 3)),
    q: v(new A.FixedSizeList(2, fld("item", new A.Float64())), (r) => [r, -r]),
    m: v(new A.Struct([fld("bytes", new A.Binary()), fld("path", new A.Utf8())]),
         (r) => ({ bytes: Uint8Array.from([r, r, r, r, r, r, r, r, r]), path: null })),
  });
  const dir = process.env.FERRY_ARROW_SEEDS;
  const seeds = [["stream", "stream", null, 0], ["file", "file", null, 1],
                 ["lz4", "stream", A.CompressionType.LZ4_FRAME, 2],
                 ["zstd", "file", A.CompressionType.ZSTD, 3]];
  for (const [name, format, compression, options] of seeds) {
    write(name, batches(t, 2), format, compression);
    const bytes = fs.readFileSync(path.join(out, name));
    fs.writeFileSync(path.join(dir, name), Buffer.concat([Buffer.from([options]), bytes]));
  }
  // HF arrays (Array2D (2, 2), Array3D (None, 1, 2)) and a fixed_size_list with nulls, under
  // Missing::nan.
  const ext = (name, shape) => new Map([
    ["ARROW:extension:name", `datasets.features.features.${name}`],
    ["ARROW:extension:metadata", JSON.stringify([shape, "float32"])],
  ]);
  const l = (t) => new A.List(fld("item", t));
  const fields = [
    new A.Field("a2", l(l(new A.Float32())), true, ext("Array2DExtensionType", [2, 2])),
    new A.Field("a3", l(l(l(new A.Float32()))), true, ext("Array3DExtensionType", [null, 1, 2])),
    fld("f", new A.FixedSizeList(2, fld("item", new A.Float32()))),
  ];
  const cols = [
    rs.map((r) => (r === 3 ? null : [[r, r], [r, r === 4 ? null : -r]])),
    rs.map((r) => [...Array(r % 3).keys()].map((k) => [[r, k]])),
    rs.map((r) => (r === 1 ? null : [r, r === 2 ? null : -r])),
  ].map((v, i) => A.vectorFromArray(v, fields[i].type));
  const schema = new A.Schema(fields);
  const data = A.makeData({ type: new A.Struct(fields), length: rs.length, nullCount: 0,
                            children: cols.map((v) => v.data[0]) });
  const nested = new A.Table(schema, [new A.RecordBatch(schema, data)]);
  const parts = [];
  for (let i = 0; i < rs.length; i += 2) parts.push(...nested.slice(i, i + 2).batches);
  write("nested", new A.Table(schema, parts.map((b) => new A.RecordBatch(schema, b.data))));
  const bytes = fs.readFileSync(path.join(out, "nested"));
  fs.writeFileSync(path.join(dir, "nested"), Buffer.concat([Buffer.from([1]), bytes]));
}
console.log("wrote Arrow files to", out);
