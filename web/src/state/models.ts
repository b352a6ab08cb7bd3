// The served models (`GET /v1/models`), for the picker.

import { signal } from '@preact/signals';
import { listModels } from '../api/client';
import { ApiError } from '../api/errors';
import type { ModelInfo } from '../api/types';
import { needKey } from './auth';
import { banner } from './ui';

export const models = signal<ModelInfo[]>([]);

export async function loadModels(): Promise<void> {
  try {
    models.value = await listModels();
    if (banner.value?.retry === retryModels) banner.value = null;
  } catch (e) {
    if (e instanceof ApiError && e.kind === 'auth') needKey.value = true;
    const message = e instanceof Error ? e.message : String(e);
    banner.value = { message: `Could not list the models: ${message}`, retry: retryModels };
    if (e instanceof ApiError && e.kind === 'loading') setTimeout(retryModels, 1000);
  }
}

function retryModels(): void {
  void loadModels();
}

/** Whether the served model `id` takes images (`input_modalities` in `/v1/models`). */
export function takesImages(id: string): boolean {
  return models.value.some((m) => m.id === id && (m.input_modalities ?? []).includes('image'));
}

/** The model a conversation asks for: its own choice if still served, else the first served one. */
export function modelFor(wanted: string): string {
  const list = models.value;
  if (list.some((m) => m.id === wanted)) return wanted;
  return list[0]?.id ?? wanted;
}
