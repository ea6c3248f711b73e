/**
 * `GET /v1/models` and `GET /v1/models/{model}`: the names the caller's key may use, in OpenAI's shapes.
 * A LoRA adapter's names also carry `root` (the adapter's name on the engines) and `parent` (its base
 * model), as vLLM lists its adapters.
 */
import { type Request, type Response } from 'express';
import { mayUse, type Principal } from '../auth/key-store.js';
import { modelNotFound } from '../core/errors.js';
import { type Deployment } from '../core/types.js';
import { type ModelCatalog } from '../registry/registry.js';
import { contextOf, shownModel } from './context.js';

export interface ModelObject {
  id: string;
  object: 'model';
  created: number;
  owned_by: string;
  /** A LoRA adapter's name on the engines. */
  root?: string;
  /** A LoRA adapter's base model. */
  parent?: string;
}

/** Every name (deployment ID, model name, alias) `principal` may use, as OpenAI model objects. */
export function modelsFor(catalog: ModelCatalog, principal: Principal): ModelObject[] {
  return catalog
    .deployments()
    .filter((d) => mayUse(principal, catalog.namesOf(d)))
    .flatMap((d) => {
      const lineage = d.adapter ? { root: d.adapter.name, parent: baseModelOf(catalog, d, principal) } : {};
      return catalog.namesOf(d).map((id): ModelObject => ({ id, object: 'model', created: d.created, owned_by: 'modelgate', ...lineage }));
    });
}

/**
 * An adapter deployment's base model, as the caller knows it: the model name of the oldest deployment
 * the caller may use that serves its first pool without an adapter, else that pool's served model.
 */
function baseModelOf(catalog: ModelCatalog, adapterDeployment: Deployment, principal: Principal): string | undefined {
  const first = adapterDeployment.targets[0];
  const pool = first && catalog.pool(first.pool);
  if (!pool) return undefined;
  const base = catalog.deployments().find((d) => !d.adapter && d.targets.some((t) => t.pool === pool.name) && mayUse(principal, catalog.namesOf(d)) && catalog.namesOf(d).includes(d.model));
  return base?.model ?? pool.servedModelName;
}

export function listModels(catalog: () => ModelCatalog) {
  return (_req: Request, res: Response): void => {
    res.json({ object: 'list', data: modelsFor(catalog(), contextOf(res).principal as Principal) });
  };
}

/** `client.models.retrieve(id)`: ids may hold a slash (`meta-llama/Llama-3.1-8B`), sent encoded or not. */
export function retrieveModel(catalog: () => ModelCatalog) {
  return (req: Request, res: Response): void => {
    const id = ([] as string[]).concat(req.params.id ?? []).join('/');
    const ctx = contextOf(res);
    ctx.model = shownModel(id);
    const model = modelsFor(catalog(), ctx.principal as Principal).find((m) => m.id === id);
    if (!model) throw modelNotFound(id, catalog().resolve(id) !== undefined);
    res.json(model);
  };
}
