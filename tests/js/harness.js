// Starts a real pagedllm-host on a free port for the tests in this directory.
// The ctest entry (tests/js/run_js_tests.sh) sets PAGEDLLM_HOST (the binary)
// and PAGEDLLM_CONFIG (a config serving a tiny model).

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import OpenAI from 'openai';

export async function startServer(overrides = []) {
  const host = process.env.PAGEDLLM_HOST;
  const config = process.env.PAGEDLLM_CONFIG;
  if (!host || !config) {
    throw new Error('PAGEDLLM_HOST and PAGEDLLM_CONFIG must be set: run these tests with ctest or scripts/test.sh');
  }
  const args = ['--config', config, '--set', 'server.port=0'];
  for (const o of overrides) args.push('--set', o);
  const child = spawn(host, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  const url = await new Promise((resolve, reject) => {
    let stdout = '';
    const timer = setTimeout(() => reject(new Error(`pagedllm-host did not start within 60 s:\n${stderr}`)), 60000);
    child.stdout.on('data', (d) => {
      stdout += d;
      const m = stdout.match(/listening on (http:\/\/\S+)/);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`pagedllm-host exited with ${code} before listening:\n${stderr}`));
    });
  });
  return {
    url,
    stderr: () => stderr,
    client: (options = {}) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'none', maxRetries: 0, ...options }),
    // Sends `signal` and resolves to the exit code.
    async stop(signal = 'SIGTERM') {
      if (child.exitCode !== null) return child.exitCode;
      const exited = once(child, 'exit');
      child.kill(signal);
      const [code] = await exited;
      return code;
    },
  };
}

// The value of a Prometheus sample (`name{...labels}`), summed over label sets.
export async function metric(url, name, labelFilter = '') {
  const text = await (await fetch(`${url}/metrics`)).text();
  let total = null;
  for (const line of text.split('\n')) {
    if (line.startsWith(`${name}{`) && line.includes(labelFilter)) {
      total = (total ?? 0) + Number(line.slice(line.lastIndexOf(' ') + 1));
    }
  }
  if (total === null) throw new Error(`no sample ${name}{${labelFilter}} in /metrics`);
  return total;
}

// Collects a stream's chunks.
export async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}
