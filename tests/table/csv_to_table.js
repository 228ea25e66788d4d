// Writes a CSV file as Parquet or as an Arrow IPC stream with independent writers (apache-arrow
// builds the table and writes Arrow; parquet-wasm, the Rust Parquet writer, writes Parquet), as a
// pandas user's to_parquet or Hugging Face datasets' cache would: a
// column whose fields are all numbers is int64 (whole numbers, none empty) or float64 (an empty
// field is a null), any other column utf8 (an empty field is a null). samples.train_table
// trains on the result and on the CSV and compares. OUT ending in .arrow: an IPC stream of
// record batches of ROWS_PER_GROUP rows; else Parquet, snappy, row groups of ROWS_PER_GROUP.
// Usage: node csv_to_table.js IN.csv OUT.parquet|OUT.arrow [ROWS_PER_GROUP]
"use strict";
const fs = require("fs");
const arrow = require("apache-arrow");
const pq = require("parquet-wasm");

const [input, output, groupArg] = process.argv.slice(2);
if (!input || !output) {
  console.error("usage: node csv_to_table.js IN.csv OUT.parquet|OUT.arrow [ROWS_PER_GROUP]");
  process.exit(2);
}

// RFC 4180 fields: quoted fields may hold commas, doubled quotes and newlines.
function parse(text) {
  const rows = [];
  let row = [];
  let field = "";
  let quoted = false;
  for (let i = 0; i < text.length; ++i) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        field += '"';
        ++i;
      } else if (c === '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c === '"') {
      quoted = true;
    } else if (c === ",") {
      row.push(field);
      field = "";
    } else if (c === "\n" || c === "\r") {
      if (c === "\r" && text[i + 1] === "\n") ++i;
      row.push(field);
      rows.push(row);
      row = [];
      field = "";
    } else {
      field += c;
    }
  }
  if (field !== "" || row.length !== 0) {
    row.push(field);
    rows.push(row);
  }
  return rows;
}

const [header, ...rows] = parse(fs.readFileSync(input, "utf8"));
const number = /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/;
const columns = {};
header.forEach((name, c) => {
  const fields = rows.map((r) => {
    if (r.length !== header.length) {
      throw new Error(`${input}: a row of ${r.length} fields, the header has ${header.length}`);
    }
    return r[c];
  });
  const present = fields.filter((f) => f !== "");
  if (present.length !== 0 && present.every((f) => number.test(f))) {
    if (present.length === fields.length && fields.every((f) => /^[-+]?\d+$/.test(f))) {
      columns[name] = arrow.vectorFromArray(fields.map((f) => BigInt(f)), new arrow.Int64());
    } else {
      columns[name] = arrow.vectorFromArray(
        fields.map((f) => (f === "" ? null : Number(f))),
        new arrow.Float64(),
      );
    }
  } else {
    columns[name] = arrow.vectorFromArray(
      fields.map((f) => (f === "" ? null : f)),
      new arrow.Utf8(),
    );
  }
});

const table = new arrow.Table(columns);
const group = groupArg ? Number(groupArg) : 64;
if (output.endsWith(".arrow")) {
  const batches = [];
  for (let first = 0; first < table.numRows; first += group) {
    batches.push(...table.slice(first, Math.min(table.numRows, first + group)).batches);
  }
  fs.writeFileSync(output, arrow.tableToIPC(new arrow.Table(batches), "stream"));
} else {
  const props = new pq.WriterPropertiesBuilder()
    .setCompression(pq.Compression.SNAPPY)
    .setMaxRowGroupSize(group)
    .build();
  const wasmTable = pq.Table.fromIPCStream(arrow.tableToIPC(table, "stream"));
  fs.writeFileSync(output, pq.writeParquet(wasmTable, props));
}
console.log(`${output}: ${rows.length} rows, ${header.length} columns`);
