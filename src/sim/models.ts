/** The body of the simulator's `GET /v1/models`, as vLLM lists its served models. */
import { newId, unixNow } from './http-io.js';

export function modelsBody(models: readonly string[], maxModelLen: number): string {
  const created = unixNow();
  return JSON.stringify({
    object: 'list',
    data: models.map((id) => ({
      id,
      object: 'model',
      created,
      owned_by: 'vllm',
      root: id,
      parent: null,
      max_model_len: maxModelLen,
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
