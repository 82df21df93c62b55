// Runs a wasm32-wasip1 command under Node's built-in WASI (node >= 20).
//
//   node tests/wasi-run.mjs MODULE.wasm DIR [ARGS...]
//
// DIR is preopened under its own path, so ARGS may name files inside it
// exactly as on the host. Stdout, stderr and the exit code are the module's.
import { readFile } from "node:fs/promises";
import { argv, env, exit } from "node:process";
import { WASI } from "node:wasi";

const [module, dir, ...args] = argv.slice(2);
if (!module || !dir) {
  console.error("usage: node wasi-run.mjs MODULE.wasm DIR [ARGS...]");
  exit(2);
}

const wasi = new WASI({
  version: "preview1",
  args: [module, ...args],
  env: { RUST_BACKTRACE: env.RUST_BACKTRACE ?? "0" },
  preopens: { [dir]: dir },
  returnOnExit: true,
});
const compiled = await WebAssembly.compile(await readFile(module));
const instance = await WebAssembly.instantiate(compiled, wasi.getImportObject());
exit(wasi.start(instance));
