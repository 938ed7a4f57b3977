/**
 * Bad input from the user (unknown db, missing file, unparseable number...).
 * The CLI prints its message as one line and exits with code 2, never a stack trace.
 */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}
