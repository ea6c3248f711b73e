/**
 * `modelgate demo` (what `npm start` runs): three simulated replicas — two chat, one embeddings — on
 * free local ports, the router in front of them on 127.0.0.1, and a demo key. Prints how to call it.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildConfig } from './config/load.js';
import { startRouter, type RunningRouter } from './main.js';
import { defaultSimOptions } from './sim/options.js';
import { startSim, type SimServer } from './sim/server.js';

export const DEMO_KEY = 'sk-modelgate-demo';
export const DEMO_CHAT_MODEL = 'llama-3.1-8b-instruct';
export const DEMO_EMBEDDING_MODEL = 'bge-small-en';

export interface DemoOptions {
  port: number;
  adminPort: number;
  logLevel: 'info' | 'warn' | 'silent';
}

export interface RunningDemo {
  router: RunningRouter;
  sims: SimServer[];
  close(): Promise<void>;
}

export async function startDemo(options: DemoOptions): Promise<RunningDemo> {
  const realistic = { ttftMs: 40, prefillMsPerToken: 0.05, itlMs: 12, jitter: 0.1, outputMin: 16, outputMax: 64 };
  const chat = ['meta-llama/Llama-3.1-8B-Instruct'];
  const sims = await Promise.all([
    startSim({ ...defaultSimOptions(), ...realistic, port: 0, name: 'llama-0', model: chat }),
    startSim({ ...defaultSimOptions(), ...realistic, port: 0, name: 'llama-1', model: chat }),
    startSim({ ...defaultSimOptions(), ...realistic, port: 0, name: 'bge-0', model: ['BAAI/bge-small-en-v1.5'], embeddingDim: 384 }),
  ]);
  const dir = await mkdtemp(join(tmpdir(), 'modelgate-demo-'));
  try {
    await writeFile(join(dir, 'keys.yaml'), `- name: demo\n  key: ${DEMO_KEY}\n`);
    const config = buildConfig(
      {
        server: { host: '127.0.0.1', port: options.port },
        admin: { host: '127.0.0.1', port: options.adminPort },
        log: { level: options.logLevel },
        auth: { keysFile: 'keys.yaml' },
        pools: [
          { name: 'llama-8b', engine: 'vllm', servedModelName: chat[0], capabilities: ['chat'], endpoints: [sims[0]?.url, sims[1]?.url] },
          { name: 'bge-small', engine: 'tei', servedModelName: 'BAAI/bge-small-en-v1.5', capabilities: ['embeddings'], endpoints: [sims[2]?.url] },
        ],
        deployments: [
          { id: 'llama-8b-prod', model: DEMO_CHAT_MODEL, aliases: ['default'], targets: [{ pool: 'llama-8b' }] },
          { id: 'bge-small-prod', model: DEMO_EMBEDDING_MODEL, aliases: ['text-embedding-3-small'], targets: [{ pool: 'bge-small' }] },
        ],
      },
      dir,
    );
    const router = await startRouter(config);
    return {
      router,
      sims,
      async close() {
        await router.close();
        await Promise.all(sims.map((s) => s.close()));
        await rm(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await Promise.all(sims.map((s) => s.close()));
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

export function demoInstructions(demo: RunningDemo): string {
  const base = demo.router.apiUrl;
  return `
modelgate demo is running.
  API:     ${base}/v1   (key: ${DEMO_KEY})
  Admin:   ${demo.router.adminUrl}/metrics  /livez  /readyz
  Models:  ${DEMO_CHAT_MODEL} (alias "default") on 2 simulated vLLM replicas,
           ${DEMO_EMBEDDING_MODEL} (alias "text-embedding-3-small") on 1 simulated embeddings replica

Try:
  curl -s ${base}/v1/chat/completions \\
    -H 'Authorization: Bearer ${DEMO_KEY}' -H 'Content-Type: application/json' \\
    -d '{"model":"${DEMO_CHAT_MODEL}","messages":[{"role":"user","content":"Hello!"}]}'

Press Ctrl+C to stop.
`;
}
