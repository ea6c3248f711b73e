import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'coverage/', 'bench/results/', '.tools/'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
    },
  },
  {
    // node:http only through src/core/node-http.ts: an ESM import of it (even `import { type X }`, which
    // stays as a bare import) loads Node's fetch implementation, 13 MiB the router never uses
    files: ['src/**/*.ts'],
    ignores: ['src/core/node-http.ts'],
    rules: {
      'no-restricted-syntax': [
        'error',
        { selector: "ImportDeclaration[source.value='node:http'][importKind!='type']", message: "Take http from src/core/node-http.ts; for types write `import type { … } from 'node:http'`." },
        // prom-client's entry point loads its Pushgateway (node:https, node:tls) and cluster aggregator
        {
          selector: "ImportDeclaration[source.value='prom-client'][importKind!='type']",
          message: "Take prom-client's classes from src/metrics/prom.ts; for types write `import type { … } from 'prom-client'`.",
        },
        // node:https loads node:tls (2 MiB): only an https engine URL should load it
        {
          selector: "ImportDeclaration[source.value='node:https'][importKind!='type']",
          message: "Take https from src/core/node-https.ts (loaded on first use); for types write `import type { … } from 'node:https'`.",
        },
      ],
    },
  },
  { files: ['**/*.js', '**/*.mjs'], ...tseslint.configs.disableTypeChecked },
  { files: ['**/*.js', '**/*.mjs'], languageOptions: { globals: globals.node } },
);
