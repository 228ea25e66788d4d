// Writes the Parquet files of list columns tests/parquet_list_test.cpp reads, with an independent
// writer: apache-arrow builds the tables, parquet-wasm (the Rust Parquet writer) writes them, and
// stores the Arrow schema (ARROW:schema) that makes a fixed_size_list's shape known.
// Usage: node write_lists.js OUT_DIR. Row r of every file holds the values the test computes
// from r (see the expected_* functions there), so the two must change together.
"use strict";
const fs = require("fs");
const path = require("path");
const arrow = require("apache-arrow");
const pq = require("parquet-wasm");

const out = process.argv[2];
if (!out) {
  console.error("usage: node write_lists.js OUT_DIR");
  process.exit(2);
}
fs.mkdirSync(out, { recursive: true });

const N = 60;
const rows = [...Array(N).keys()];
const fld = (name, type, nullable = true) => new arrow.Field(name, type, nullable);
const listOf = (type) => new arrow.List(fld("item", type));
const fixedOf = (n, type) => new arrow.FixedSizeList(n, fld("item", type));
const range = (n) => [...Array(n).keys()];
const vec = (type, values) => arrow.vectorFromArray(values, type);

// The values: the test's expected_* compute the same.
const li = (r) => range(r % 5).map((k) => r * 10 + k - 100);            // list<int32>, [] when r % 5 == 0
const lf = (r) => range((r * 3) % 4).map((k) => r + k * 0.25);          // list<float>
const ll = (r) => range(r % 3).map((k) => BigInt(r) * 1000000000000n + BigInt(k) - 7n); // list<int64>
const l8 = (r) => range((r % 2) + 1).map((k) => ((r + k * 50) % 256) - 128);             // list<int8>
const f4 = (r) => range(4).map((k) => r + k * 0.5);                      // fixed_size_list<float>[4]
const a2 = (r) => range(2).map((i) => range(3).map((j) => r * 10 + i * 3 + j)); // [2][3] floats
const ragged23 = (r) => range(r % 3).map((i) => range(3).map((j) => r - i * 3 - j)); // list<[3]>

function table(rs) {
  return new arrow.Table({
    id: vec(new arrow.Int64(), rs.map((r) => BigInt(r))),
    li: vec(listOf(new arrow.Int32()), rs.map(li)),
    lf: vec(listOf(new arrow.Float32()), rs.map(lf)),
    ll: vec(listOf(new arrow.Int64()), rs.map(ll)),
    l8: vec(listOf(new arrow.Int8()), rs.map(l8)),
    f4: vec(fixedOf(4, new arrow.Float32()), rs.map(f4)),
    a2: vec(fixedOf(2, fixedOf(3, new arrow.Float32())), rs.map(a2)),
    lr: vec(listOf(fixedOf(3, new arrow.Float64())), rs.map(ragged23)),
  });
}

const written = new Map();
function write(name, t, props) {
  const wasmTable = pq.Table.fromIPCStream(arrow.tableToIPC(t, "stream"));
  const bytes = pq.writeParquet(wasmTable, props);
  fs.writeFileSync(path.join(out, name), bytes);
  written.set(name, bytes);
}

function small(dict, version, codec = pq.Compression.SNAPPY) {
  // Row groups of 16 rows, a page every 4 rows (a page ends once it holds a byte).
  let b = new pq.WriterPropertiesBuilder();
  if (!dict) b = b.setEncoding(pq.Encoding.PLAIN);
  return b.setCompression(codec)
    .setDictionaryEnabled(dict)
    .setWriterVersion(version === 1 ? pq.WriterVersion.V1 : pq.WriterVersion.V2)
    .setMaxRowGroupSize(16)
    .setDataPageSizeLimit(1)
    .setWriteBatchSize(4)
    .build();
}

for (const dict of [true, false]) {
  for (const version of [1, 2]) {
    write(`lists_${dict ? "dict" : "plain"}_v${version}.parquet`, table(rows), small(dict, version));
  }
}
// The writer's own encodings for pages v2 without a dictionary: DELTA_BINARY_PACKED integers.
{
  const props = new pq.WriterPropertiesBuilder()
    .setCompression(pq.Compression.ZSTD)
    .setDictionaryEnabled(false)
    .setWriterVersion(pq.WriterVersion.V2)
    .setMaxRowGroupSize(16)
    .setDataPageSizeLimit(1)
    .setWriteBatchSize(4)
    .build();
  write("lists_delta_v2.parquet", table(rows), props);
}
// One column, uncompressed PLAIN pages v1: a test corrupts its levels in place.
write("lists_one.parquet", new arrow.Table({ li: vec(listOf(new arrow.Int32()), rows.map(li)) }),
      small(false, 1, pq.Compression.UNCOMPRESSED));

// Nulls: a null list every 7th row (from 3), a null element every 11th (from 5) in li;
// f4 a null row every 5th (from 2) and a null element every 6th (from 1); i2 (int32[2]) a
// null row every 9th (from 4); lf without nulls.
const liNull = (r) => (r % 7 === 3 ? null : r % 11 === 5 ? [r, null, r + 2] : li(r));
const f4Null = (r) => (r % 5 === 2 ? null : r % 6 === 1 ? [r, null, r, r] : f4(r));
write("lists_nulls.parquet", new arrow.Table({
  li: vec(listOf(new arrow.Int32()), rows.map(liNull)),
  f4: vec(fixedOf(4, new arrow.Float32()), rows.map(f4Null)),
  i2: vec(fixedOf(2, new arrow.Int32()), rows.map((r) => (r % 9 === 4 ? null : [r, -r]))),
  lf: vec(listOf(new arrow.Float32()), rows.map(lf)),
}), small(true, 1));

// Not read: a map, a struct, a list of lists that vary inside, a list of strings; and f4 as a
// list<float> (not the fixed_size_list of the other files).
write("lists_other.parquet", new arrow.Table({
  id: vec(new arrow.Int64(), rows.map((r) => BigInt(r))),
  f4: vec(listOf(new arrow.Float32()), rows.map(f4)),
  ll: vec(listOf(listOf(new arrow.Int32())), rows.map((r) => [[r], range(r % 3)])),
  ls: vec(listOf(new arrow.Utf8()), rows.map((r) => [`${r}`])),
  st: vec(new arrow.Struct([fld("a", new arrow.Int32()), fld("b", new arrow.Float64())]),
          rows.map((r) => ({ a: r, b: r * 0.5 }))),
}), small(true, 1));

// Hugging Face's Array2D/Array3D in Parquet (beside lq, a required list of required int32): list<list<T>> storage, the shape in the field's
// extension metadata (kept in ARROW:schema). h2: Array2D (2, 3) float32, row r
// [[r, r+1, r+2], [-r, -r-1, -r-2]]; h3: Array3D (null, 2, 2) int32, r % 3 blocks, block k
// [[r, k], [r+k, -r]].
{
  const ext = (name, shape, dtype) => new Map([
    ["ARROW:extension:name", `datasets.features.features.${name}`],
    ["ARROW:extension:metadata", JSON.stringify([shape, dtype])],
  ]);
  const list2 = (t) => listOf(listOf(t));
  const fields = [
    // lq: a list (not null) of int32 (not null), as li: required group (LIST) { repeated group
    // list { required int32 item } }.
    new arrow.Field("lq", new arrow.List(new arrow.Field("item", new arrow.Int32(), false)), false),
    new arrow.Field("h2", list2(new arrow.Float32()), true, ext("Array2DExtensionType", [2, 3], "float32")),
    new arrow.Field("h3", listOf(list2(new arrow.Int32())), true,
                    ext("Array3DExtensionType", [null, 2, 2], "int32")),
  ];
  const values = {
    lq: li,
    h2: (r) => [[r, r + 1, r + 2], [-r, -r - 1, -r - 2]],
    h3: (r) => range(r % 3).map((k) => [[r, k], [r + k, -r]]),
  };
  const schema = new arrow.Schema(fields);
  const columns = fields.map((f) => vec(f.type, rows.map(values[f.name])));
  const data = arrow.makeData({ type: new arrow.Struct(fields), length: N, nullCount: 0,
                                children: columns.map((v) => v.data[0]) });
  write("lists_hf.parquet", new arrow.Table(schema, [new arrow.RecordBatch(schema, data)]),
        small(true, 2));
}

// A wrong length: the rows of a list<float> column `v` (row 13 has 3 values, the others 4),
// whose stored Arrow schema says fixed_size_list<float>[4] (the schema of the same table with
// such a column put in its place in the footer, whose lengths are fixed up).
{
  const vals = rows.map((r) => (r === 13 ? [1, 2, 3] : f4(r)));
  write("wrong_list.parquet", new arrow.Table({ v: vec(listOf(new arrow.Float32()), vals) }),
        small(false, 1));
  write("wrong_fixed.parquet", new arrow.Table({ v: vec(fixedOf(4, new arrow.Float32()), rows.map(f4)) }),
        small(false, 1));
}

write("forged_fixed.parquet",
      new arrow.Table({ v: vec(fixedOf(4951, new arrow.Int32()), [[...Array(4951).keys()]]) }),
      small(false, 1));

(async () => {
  const schemaOf = async (name) => {
    const file = await pq.ParquetFile.fromFile(new Blob([written.get(name)]));
    return file.metadata().fileMetadata().keyValueMetadata().get("ARROW:schema");
  };
  // Every file stores its Arrow schema (what makes fixed_size_list read as such).
  for (const name of written.keys()) {
    if (!(await schemaOf(name))) throw new Error(`${name}: no ARROW:schema`);
  }
  // The delta file's chunks are in the encodings named.
  {
    const file = await pq.ParquetFile.fromFile(new Blob([written.get("lists_delta_v2.parquet")]));
    const want = { "li.list.item": pq.Encoding.DELTA_BINARY_PACKED,
                   "ll.list.item": pq.Encoding.DELTA_BINARY_PACKED,
                   "l8.list.item": pq.Encoding.DELTA_BINARY_PACKED };
    for (const g of file.metadata().rowGroups()) {
      for (const c of g.columns()) {
        const name = c.columnPath().join(".");
        if (want[name] !== undefined && (!c.encodings().includes(want[name]) ||
                                         c.encodings().includes(pq.Encoding.PLAIN))) {
          throw new Error(`lists_delta_v2.parquet: ${name}: encodings ${c.encodings()}`);
        }
      }
    }
  }
  // forged_fixed.parquet: one row of fixed_size_list<int32>[4951], the size in its stored Arrow
  // schema forged to 2^31 - 1 (the base64 text re-encoded to the same length, so that nothing
  // else moves).
  {
    const name = "forged_fixed.parquet";
    const text = await schemaOf(name);
    const schema = Buffer.from(text, "base64");
    const size = Buffer.from([0x57, 0x13, 0, 0]);
    const at = schema.indexOf(size);
    if (at < 0 || schema.indexOf(size, at + 1) >= 0) throw new Error(`${name}: list size not found once`);
    schema.writeInt32LE(0x7fffffff, at);
    const forged = schema.toString("base64");
    const bytes = Buffer.from(written.get(name));
    const where = bytes.indexOf(Buffer.from(text, "latin1"));
    if (forged.length !== text.length || where < 0) throw new Error(`${name}: schema not patched`);
    Buffer.from(forged, "latin1").copy(bytes, where);
    fs.writeFileSync(path.join(out, name), bytes);
  }
  const from = await schemaOf("wrong_list.parquet");
  const to = await schemaOf("wrong_fixed.parquet");
  const bytes = Buffer.from(written.get("wrong_list.parquet"));
  const at = bytes.indexOf(Buffer.from(from, "latin1"));
  // The value's length before it: a varint of the Thrift compact protocol.
  const varint = (n) => {
    const b = [];
    for (; n >= 0x80; n >>>= 7) b.push((n & 0x7f) | 0x80);
    b.push(n);
    return Buffer.from(b);
  };
  const oldLen = varint(from.length);
  if (at < 0 || !bytes.subarray(at - oldLen.length, at).equals(oldLen)) {
    throw new Error("wrong_list.parquet: ARROW:schema not found as a Thrift string");
  }
  const footerLen = bytes.readUInt32LE(bytes.length - 8);
  const patched = Buffer.concat([bytes.subarray(0, at - oldLen.length), varint(to.length),
                                 Buffer.from(to, "latin1"), bytes.subarray(at + from.length, bytes.length - 8)]);
  const tail = Buffer.alloc(8);
  tail.writeUInt32LE(footerLen + (varint(to.length).length - oldLen.length) + to.length - from.length, 0);
  tail.write("PAR1", 4, "latin1");
  fs.writeFileSync(path.join(out, "wrong_list.parquet"), Buffer.concat([patched, tail]));
  fs.rmSync(path.join(out, "wrong_fixed.parquet"));
  console.log("wrote", written.size - 1, "files to", out);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
