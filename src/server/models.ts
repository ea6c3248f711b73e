/** `GET /v1/models` and `GET /v1/models/{model}`: the names the caller's key may use, in OpenAI's shapes. */
import { type Request, type Response } from 'express';
import { mayUse, type Principal } from '../auth/key-store.js';
import { modelNotFound } from '../core/errors.js';
import { type ModelCatalog } from '../registry/registry.js';
import { contextOf } from './context.js';

export interface ModelObject {
  id: string;
  object: 'model';
  created: number;
  owned_by: string;
}

/** Every name (deployment ID, model name, alias) `principal` may use, as OpenAI model objects. */
export function modelsFor(catalog: ModelCatalog, principal: Principal): ModelObject[] {
  return catalog
    .deployments()
    .filter((d) => mayUse(principal, d))
    .flatMap((d) => catalog.namesOf(d).map((id) => ({ id, object: 'model' as const, created: d.created, owned_by: 'modelgate' })));
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
    ctx.model = id;
    const model = modelsFor(catalog(), ctx.principal as Principal).find((m) => m.id === id);
    if (!model) throw modelNotFound(id, catalog().resolve(id) !== undefined);
    res.json(model);
  };
}
