// A real `hearth serve` (the binary in $HEARTH_BIN) on a loopback port, for the browser tests and the benchmark.

import { spawn } from 'node:child_process';
import readline from 'node:readline';

const running = new Set();
process.on('exit', () => {
  for (const p of running) p.kill('SIGKILL');
});

export function hearthBin() {
  const bin = process.env.HEARTH_BIN;
  if (!bin) throw new Error('set HEARTH_BIN to the hearth binary (cargo build --release -p hearth-cli: target/release/hearth)');
  return bin;
}

/** Start `hearth serve` (port 0: any free one) and wait for its ready banner. */
export async function startHearth({ port = 0, args = [], timeoutMs = 120_000 } = {}) {
  const argv = ['serve', '--host', '127.0.0.1', '--port', String(port), '--kv-budget', '0.25', '--threads', '2', ...args];
  const env = { ...process.env };
  for (const k of ['HEARTH_API_KEY', 'HEARTH_PORT', 'HEARTH_HOST', 'HEARTH_NO_UI', 'HEARTH_OPEN']) delete env[k];
  const proc = spawn(hearthBin(), argv, { env, stdio: ['ignore', 'ignore', 'pipe'] });
  running.add(proc);
  const log = [];
  const lines = readline.createInterface({ input: proc.stderr });
  const ready = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`hearth did not become ready:\n${log.join('\n')}`)), timeoutMs);
    lines.on('line', (line) => {
      log.push(line);
      if (process.env.HEARTH_TEST_VERBOSE) console.error(`[hearth] ${line}`);
      const m = /ready on http:\/\/127\.0\.0\.1:(\d+)/.exec(line);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`hearth exited (${code}) before it was ready:\n${log.join('\n')}`));
    });
  });
  const p = await ready;
  const exited = new Promise((resolve) => proc.on('exit', resolve));
  return {
    port: p,
    url: `http://127.0.0.1:${p}`,
    log,
    /** Kill it (a crash, as far as a client can tell) and wait until it is gone. */
    async stop() {
      running.delete(proc);
      proc.kill('SIGKILL');
      await exited;
    },
  };
}
