// Same-origin calls to hearth's API, with the API key when one is set.

import { ApiError, fromResponse, offline } from './errors';
import type { EngineStats, ModelInfo } from './types';
import { apiKey } from '../state/auth';

export function headers(json = false): HeadersInit {
  const h: Record<string, string> = {};
  if (json) h['Content-Type'] = 'application/json';
  if (apiKey.value) h['Authorization'] = `Bearer ${apiKey.value}`;
  return h;
}

/** fetch, turning network failures and non-2xx answers into `ApiError`s. */
export async function call(path: string, init: RequestInit = {}): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(path, { ...init, headers: { ...headers(!!init.body), ...(init.headers ?? {}) } });
  } catch (e) {
    if (e instanceof DOMException && e.name === 'AbortError') throw e;
    throw offline(e);
  }
  if (!res.ok) throw await fromResponse(res);
  return res;
}

export async function listModels(): Promise<ModelInfo[]> {
  const body = await (await call('/v1/models')).json();
  return Array.isArray(body?.data) ? body.data : [];
}

export async function engineStats(): Promise<EngineStats> {
  return (await call('/stats')).json();
}

export async function metricsText(): Promise<string> {
  return (await call('/metrics')).text();
}

export { ApiError };
