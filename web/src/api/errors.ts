// What went wrong talking to the server, in words a person can act on.

export type ErrorKind = 'offline' | 'auth' | 'client' | 'server' | 'loading' | 'stream';

export class ApiError extends Error {
  constructor(
    readonly kind: ErrorKind,
    message: string,
    readonly status = 0,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

/** The error of a non-2xx response: the API's own message when it sent one (OpenAI's error shape). */
export async function fromResponse(res: Response): Promise<ApiError> {
  let message = `${res.status} ${res.statusText}`.trim();
  let code = '';
  try {
    const body = await res.json();
    if (body?.error?.message) message = `${res.status}: ${body.error.message}`;
    code = body?.error?.code ?? '';
  } catch {
    // Not JSON: keep the status line.
  }
  if (res.status === 401) return new ApiError('auth', message, 401);
  if (res.status === 503 && code === 'model_loading') return new ApiError('loading', message, 503);
  return new ApiError(res.status >= 500 ? 'server' : 'client', message, res.status);
}

/** A fetch that never reached the server. */
export function offline(e: unknown): ApiError {
  const why = e instanceof Error ? e.message : String(e);
  return new ApiError('offline', `Cannot reach the hearth server (${why}). Is it running?`);
}
