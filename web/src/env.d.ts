// Stylesheets are bundled by esbuild.
declare module '*.css';
