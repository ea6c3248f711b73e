/** The shape of a request body that passed validation (a module of its own, so that every part of `api` can name it without loading validation). */
export interface ValidRequest {
  model: string;
  stream?: boolean | null;
  extra_body?: Record<string, unknown> | null;
  [field: string]: unknown;
}
