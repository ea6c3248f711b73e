/** The body of the simulator's `GET /v1/models`, as vLLM lists its served models. */
import { newId, unixNow } from './http-io.js';

/** Base models first, then LoRA adapters (`parent`: the first base model, `max_model_len` null), as vLLM lists them. */
export function modelsBody(models: readonly string[], maxModelLen: number, adapters: readonly string[] = []): string {
  const created = unixNow();
  const entries: Array<{ id: string; root: string; parent: string | null; maxLen: number | null }> = [
    ...models.map((id) => ({ id, root: id, parent: null, maxLen: maxModelLen })),
    ...adapters.map((id) => ({ id, root: id, parent: models[0] ?? null, maxLen: null })),
  ];
  return JSON.stringify({
    object: 'list',
    data: entries.map(({ id, root, parent, maxLen }) => ({
      id,
      object: 'model',
      created,
      owned_by: 'vllm',
      root,
      parent,
      max_model_len: maxLen,
      permission: [
        {
          id: `modelperm-${newId()}`,
          object: 'model_permission',
          created,
          allow_create_engine: false,
          allow_sampling: true,
          allow_logprobs: true,
          allow_search_indices: false,
          allow_view: true,
          allow_fine_tuning: false,
          organization: '*',
          group: null,
          is_blocking: false,
        },
      ],
    })),
  });
}
